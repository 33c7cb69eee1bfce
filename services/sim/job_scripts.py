"""The jobs' task scripts (`services.jobs.scripts`) on a simulated host.

They arrive as `sh -c <SCRIPT> warden-job <args>`, for any login user, whose tasks only that
login sees (the state directory is not modelled). START makes a task (`exists` while one of
that name runs) with one GPU process (owned by the login, one pid on each GPU named by uuid or
index in CUDA_VISIBLE_DEVICES, the command as its command line); the command decides how it
ends: `sleep N` anywhere ends it after N s with status 0, `exit N` anywhere with N (at once,
or after the sleep), anything else runs until signalled; `trap '' INT TERM` in it ignores
those signals, `trap 'save; exit 0' USR1 TERM` handles them: the signal ends it with the
handler's `exit` status (0 without one) and its log says it saved a checkpoint. SIGNAL: INT
ends it with 130, TERM with 143, USR1 with 138, KILL with no status (STATUS says `gone`); 0
only checks. STATUS says running, exited, gone or unknown per session; LOG prints a
few `sim: ...` lines. Stopping a task's GPU process (`SimFleet.stop_process`, the violations'
SIGNAL) ends the task too (137; 143 for SIGTERM), as its runner shell would write.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable

from services.jobs.scripts import (
    ENV_NAME_RE,
    LOG_MARK,
    LOG_SCRIPT,
    MULTIPLEXERS,
    RUNNER_SCRIPT,
    SESSION_RE,
    SIGNAL_SCRIPT,
    SIGNALS,
    START_SCRIPT,
    STATUS_SCRIPT,
)
from services.sim.gpus import SimProcess
from services.sim.host import SimHost, SimTask
from services.sim.shell import CommandResult, is_number

# What a task's command does in the simulator (see the module doc).
_SLEEP_RE = re.compile(r"(?<![\w.-])sleep\s+([0-9]+(?:\.[0-9]+)?)(?![\w.])")
_EXIT_RE = re.compile(r"(?<![\w.-])exit\s+([0-9]+)(?![\w.])")
_TRAP_RE = re.compile(r"""trap\s+(?:''|"")((?:\s+(?:SIG)?(?:INT|TERM)\b)+)""")
_HANDLER_RE = re.compile(r"""trap\s+'([^']+)'((?:\s+(?:SIG)?(?:INT|TERM|USR1)\b)+)""")
_SIGNAL_EXIT = {"INT": 130, "TERM": 143, "USR1": 138}


def answer(
    host: SimHost,
    script: str,
    args: list[str],
    login: str,
    now: float,
    emit: Callable[[str], None],
) -> CommandResult | None:
    """START, STATUS, SIGNAL or LOG as `login`; None for another script or wrong arguments.
    `emit(what)` tells the fleet's listeners what changed."""
    if script == START_SCRIPT and len(args) >= 6:
        return _start(host, login, args, now, emit)
    if script == STATUS_SCRIPT and args:
        return _status(host, login, args[0], args[1:], now)
    if script == SIGNAL_SCRIPT and len(args) == 3:
        return _signal(host, login, args, now, emit)
    if script == LOG_SCRIPT and len(args) == 3:
        return _log(host, login, args, now)
    return None


def _handlers(command: str) -> dict[str, int]:
    """Signal -> the exit status its `trap '...' SIG` handler ends the command with."""
    handlers = {}
    for match in _HANDLER_RE.finditer(command):
        exit_ = _EXIT_RE.search(match[1])
        for word in match[2].split():
            handlers[word.removeprefix("SIG")] = int(exit_[1]) % 256 if exit_ else 0
    return handlers


def _behaviour(command: str) -> tuple[float | None, int, frozenset[str]]:
    """(seconds until it ends by itself or None, its exit status then, signals it ignores)."""
    command = _HANDLER_RE.sub("", command)  # a handler's `exit` is not the command's
    sleep = _SLEEP_RE.search(command)
    exit_ = _EXIT_RE.search(command)
    duration = float(sleep[1]) if sleep else (0.0 if exit_ else None)
    ignores = {
        word.removeprefix("SIG")
        for match in _TRAP_RE.finditer(command)
        for word in match[1].split()
    }
    return duration, int(exit_[1]) % 256 if exit_ else 0, frozenset(ignores)


def _visible_gpus(host: SimHost, visible: str) -> tuple[int, ...]:
    """The GPUs CUDA_VISIBLE_DEVICES names (uuids or indexes; a MIG instance's uuid names its
    GPU); others are skipped."""
    by_uuid = {g.uuid: g.index for g in host.gpus if not g.removed}
    by_uuid.update({m.uuid: g.index for g in host.gpus if not g.removed for m in g.mig})
    found = []
    for word in visible.split(","):
        word = word.strip()
        if word in by_uuid:
            found.append(by_uuid[word])
        elif word.isdigit() and int(word) in by_uuid.values():
            found.append(int(word))
    return tuple(sorted(set(found)))


def _visible_instance(host: SimHost, visible: str) -> int | None:
    """The MIG instance (MIG Dev) CUDA_VISIBLE_DEVICES names first, as CUDA uses only one."""
    for word in visible.split(","):
        for gpu in host.gpus:
            for m in gpu.mig:
                if m.uuid == word.strip():
                    return m.device
    return None


def _start(
    host: SimHost, login: str, args: list[str], now: float, emit: Callable[[str], None]
) -> CommandResult | None:
    mux, session, state_dir, cwd, command, runner, *pairs = args
    if runner != RUNNER_SCRIPT:
        return None
    if (
        mux not in MULTIPLEXERS
        or not SESSION_RE.fullmatch(session)
        or not state_dir
        or not command
        or any(
            "=" not in pair or not ENV_NAME_RE.fullmatch(pair.split("=", 1)[0]) for pair in pairs
        )
    ):
        return CommandResult("invalid\n", "", 2)
    old = host.tasks.get((login, session))
    if old is not None and old.state(now)[0] == "running":
        return CommandResult("exists\n", "", 0)
    env = dict(pair.split("=", 1) for pair in pairs)
    gpus = _visible_gpus(host, env.get("CUDA_VISIBLE_DEVICES", ""))
    duration, natural_exit, ignores = _behaviour(command)
    ends_at = None if duration is None else now + duration
    pid = host.free_pid(now)
    line = " ".join(command.split())[:256]
    gpu_pid = None
    if gpus:
        gpu_pid = host.free_pid(now, also=(pid,))
        rng = random.Random(f"{host.seed}/{host.name}/{login}/{session}/{pid}")
        total = host.gpus[gpus[0]].model.memory_total_mib
        host.scripted[gpu_pid] = SimProcess(
            pid=gpu_pid,
            user=login,
            command=line,
            gpus=gpus,
            used_memory_mib=int(total * rng.uniform(0.1, 0.6)),
            started_at=now,
            ends_at=ends_at,
            scripted=True,
            ignore_sigterm="TERM" in ignores,
            mig=_visible_instance(host, env.get("CUDA_VISIBLE_DEVICES", "")),
        )
    host.tasks[(login, session)] = SimTask(
        user=login,
        session=session,
        multiplexer=mux,
        cwd=cwd,
        command=line,
        env=env,
        pid=pid,
        started_at=now,
        gpus=gpus,
        gpu_pid=gpu_pid,
        ends_at=ends_at,
        natural_exit=natural_exit,
        ignores=ignores,
        handlers=_handlers(command),
    )
    emit("tasks")
    if gpus:
        emit("processes")
    return CommandResult(f"started {pid} {int(now)}\n", "", 0)


def _status(
    host: SimHost, login: str, state_dir: str, sessions: list[str], now: float
) -> CommandResult:
    if not state_dir or not all(SESSION_RE.fullmatch(s) for s in sessions):
        return CommandResult("invalid\n", "", 2)
    lines = []
    for session in sessions:
        task = host.tasks.get((login, session))
        if task is None:
            lines.append(f"{session} unknown\n")
            continue
        state, code = task.state(now)
        if state == "running":
            lines.append(f"{session} running {task.pid} {int(task.started_at)}\n")
        elif state == "exited":
            lines.append(f"{session} exited {code}\n")
        else:
            lines.append(f"{session} gone\n")
    return CommandResult("".join(lines) + "ok\n", "", 0)


def _signal(
    host: SimHost, login: str, args: list[str], now: float, emit: Callable[[str], None]
) -> CommandResult:
    state_dir, session, signal = args
    if signal not in SIGNALS or not state_dir or not SESSION_RE.fullmatch(session):
        return CommandResult("invalid\n", "", 2)
    task = host.tasks.get((login, session))
    if task is None or task.state(now)[0] != "running":
        return CommandResult("gone\n", "", 0)
    if signal == "0" or signal in task.ignores:
        return CommandResult("signalled\n", "", 0)
    task.ended_at, task.exit_code = now, _SIGNAL_EXIT.get(signal)
    if signal in task.handlers:
        task.exit_code, task.caught = task.handlers[signal], signal
    proc = host.scripted.pop(task.gpu_pid, None) if task.gpu_pid is not None else None
    if proc is not None:
        for index in proc.gpus:
            host.gpus[index].last_stop = now
        emit("processes")
    emit("tasks")
    return CommandResult("signalled\n", "", 0)


def _log(host: SimHost, login: str, args: list[str], now: float) -> CommandResult:
    state_dir, session, max_text = args
    if not state_dir or not SESSION_RE.fullmatch(session) or not is_number(max_text):
        return CommandResult("invalid\n", "", 2)
    task = host.tasks.get((login, session))
    if task is None:
        return CommandResult(f"{LOG_MARK} missing\n", "", 0)
    data = _log_text(task, now).encode()
    tail = data[len(data) - min(len(data), int(max_text)) :]
    text = f"{LOG_MARK} begin\n{tail.decode(errors='replace')}\n"
    return CommandResult(f"{text}{LOG_MARK} ok {len(data)}\n", "", 0)


def _log_text(task: SimTask, t: float) -> str:
    """The task's whole log at `t`: how it started and, once it has, how it ended."""
    lines = [
        f"sim: {task.session} started: {task.command}",
        f"sim: pid {task.pid} in {task.cwd or '~'} with {task.multiplexer}, "
        f"CUDA_VISIBLE_DEVICES={task.env.get('CUDA_VISIBLE_DEVICES', '')}",
    ]
    state, code = task.state(t)
    if task.caught is not None and state != "running":
        lines.append(f"sim: {task.session} caught SIG{task.caught} and saved a checkpoint")
    if state == "exited":
        lines.append(f"sim: {task.session} exited with status {code}")
    elif state == "gone":
        lines.append(f"sim: {task.session} was killed")
    return "".join(line + "\n" for line in lines)
