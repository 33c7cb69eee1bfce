"""A simulated GPU fleet: hosts, GPUs and the processes on them, as functions of time.

Pure: no I/O, no clock read except through the `clock` passed in. Everything a host reports
at time `t` follows from the seed, `t` and what was scripted (`start_process`, `set_hang`, ...).

`SimFleet` holds the hosts (`host`: their state; `gpus`: their GPUs and background jobs) and
the clock, takes the scripted changes and tells its listeners about them, and answers the
commands Warden runs on a host (`run_command`) with the module that imitates each:

- `probe_output`: the probe, and `warden hosts check`'s `echo ok`, `command -v nvidia-smi`,
  `nvidia-smi -L`;
- `violation_scripts`: the violation actions' scripts (`services.violations.scripts`): who,
  write to a terminal, signal a process;
- `job_scripts`: the jobs' task scripts (`services.jobs.scripts`): start, status, signal, log;
- `id -un` (the SSH self-signup's proof): the login's name (every user exists and holds
  Warden's key on a simulated host).

Anything else answers "sim: unsupported command" with exit status 127.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any, Literal, cast

from services.jobs.scripts import SCRIPT_NAME as JOB_SCRIPT_NAME
from services.shared.errors import InvalidRequest, NotFound
from services.shared.topology_shapes import SHAPES
from services.sim import job_scripts, probe_output, violation_scripts
from services.sim.gpu_faults import GPU_FAULTS
from services.sim.gpus import DEFAULT_GPU_MODEL, GPU_MODELS, SimProcess
from services.sim.host import (
    NVIDIA_SMI_MODES,
    NvidiaSmiMode,
    SimHost,
    SimTask,
    TerminalSession,
    make_host,
)
from services.sim.mig import check_instance, make_instances
from services.sim.probe_output import NVIDIA_SMI_FAILED
from services.sim.shell import UNSUPPORTED, CommandResult, LoginShell, script_call
from services.violations.scripts import SCRIPT_NAME as VIOLATION_SCRIPT_NAME

# The fleet, and the values its callers use with it (GPU models, nvidia-smi modes and texts).
__all__ = [
    "DEFAULT_GPU_MODEL",
    "GPU_MODELS",
    "NVIDIA_SMI_FAILED",
    "NVIDIA_SMI_MODES",
    "SimEvent",
    "SimFleet",
]

_USER_RE = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class SimEvent:
    """A scripted change, for listeners (the SSH server closes connections on `down`)."""

    host: str
    what: str  # down | hang | nvidia_smi | processes | gpus | ttys | tasks


class SimFleet:
    """Hosts `sim-001`, `sim-002`, ... with `gpus_per_host` GPUs each."""

    def __init__(
        self,
        hosts: int,
        gpus_per_host: int,
        seed: int = 0,
        *,
        churn: bool = True,
        churn_period_s: float = 1800.0,
        gpu_model: str = DEFAULT_GPU_MODEL,
        login_shell: LoginShell = "bash",
        pid_max: int = 4194304,
        clock: Callable[[], float] = time.time,
        start_time: float | None = None,
        topology: str | None = None,
    ) -> None:
        if hosts < 1 or gpus_per_host < 0:
            raise InvalidRequest("a fleet needs at least one host and no negative GPU count")
        if gpu_model not in GPU_MODELS:
            raise InvalidRequest(f"unknown GPU model {gpu_model!r}", {"known": sorted(GPU_MODELS)})
        if churn_period_s <= 0:
            raise InvalidRequest("churn_period_s must be positive")
        if topology is not None and topology not in SHAPES:
            raise InvalidRequest(f"unknown topology {topology!r}", {"known": list(SHAPES)})
        self.seed = seed
        # Logins in group tty on every host (they write to anyone's terminal): the management
        # user, as on a host set up for Warden.
        self.tty_group: set[str] = {"warden"}
        self.churn = churn
        self.churn_period_s = churn_period_s
        self.login_shell: LoginShell = login_shell
        self.pid_max = pid_max
        self._clock = clock
        self._listeners: list[Callable[[SimEvent], None]] = []
        start = clock() if start_time is None else start_time
        width = max(3, len(str(hosts)))
        model = GPU_MODELS[gpu_model]
        self._hosts: dict[str, SimHost] = {}
        for number in range(1, hosts + 1):
            name = f"sim-{number:0{width}d}"
            self._hosts[name] = make_host(
                name,
                number,
                gpus_per_host,
                model,
                start,
                seed=seed,
                churn=churn,
                churn_period_s=churn_period_s,
                pid_max=pid_max,
            )
            self._hosts[name].topology = topology

    # -- reading --------------------------------------------------------------------------

    @property
    def hosts(self) -> tuple[str, ...]:
        return tuple(self._hosts)

    def now(self) -> float:
        return self._clock()

    def subscribe(self, listener: Callable[[SimEvent], None]) -> Callable[[], None]:
        """Call `listener` on every scripted change; returns the unsubscribe function."""
        self._listeners.append(listener)
        return lambda: self._listeners.remove(listener)

    def _emit(self, host: str, what: str) -> None:
        for listener in list(self._listeners):
            listener(SimEvent(host, what))

    def _host(self, name: str) -> SimHost:
        try:
            return self._hosts[name]
        except KeyError:
            raise NotFound(f"no simulated host {name!r}", {"host": name}) from None

    def is_down(self, host: str) -> bool:
        return self._host(host).down

    def hang_s(self, host: str) -> float | None:
        """Seconds a command waits before it answers (math.inf: never); None: no hang."""
        return self._host(host).hang_s

    # -- commands -----------------------------------------------------------------------

    def render_probe_output(self, host: str, now: float) -> str:
        """Exactly what PROBE_COMMAND prints on `host` at `now` (seconds since the epoch)."""
        return probe_output.render(self._host(host), now, self.login_shell)

    def nvidia_smi_query(
        self, host: str, what: Literal["gpus", "apps", "health"], now: float
    ) -> CommandResult:
        """What `nvidia-smi --query-gpu=...` (gpus) or `--query-compute-apps=...` (apps) alone
        prints: lets a test run the real PROBE_COMMAND around it and compare with
        `render_probe_output`. (When nvidia-smi is missing, the shell's message, on stderr.)"""
        return probe_output.nvidia_smi_query(self._host(host), what, now, self.login_shell)

    def run_command(
        self, host: str, command: str, now: float, *, login: str | None = None
    ) -> CommandResult:
        """What `command` prints on `host` when `login` (None: root) runs it: the probe, the
        `warden hosts check` commands, the violation actions' and the jobs' scripts (see the
        module doc)."""
        h = self._host(host)
        if command == "id -un":
            return CommandResult(f"{login or 'root'}\n", "", 0)
        if command == "id -un; id -nG":  # `warden hosts check`: may it write on terminals?
            name = login or "root"
            groups = [name, "tty"] if name in self.tty_group else [name]
            return CommandResult(f"{name}\n{' '.join(groups)}\n", "", 0)
        answer = probe_output.answer(h, command, now, self.login_shell)
        call = script_call(command) if answer is None else None
        emit = partial(self._emit, host)
        if call is not None and call.name == JOB_SCRIPT_NAME and not call.sudo:
            answer = job_scripts.answer(h, call.script, call.args, login or "root", now, emit)
        elif call is not None and call.name == VIOLATION_SCRIPT_NAME:
            answer = violation_scripts.answer(
                h,
                call.script,
                call.args,
                as_root=call.sudo or login is None or login == "root",
                login=login,
                now=now,
                stop=lambda pid, exit_code: self.stop_process(host, pid, exit_code=exit_code),
                emit=emit,
                in_tty_group=login in self.tty_group,
            )
        return CommandResult("", UNSUPPORTED, 127) if answer is None else answer

    # -- terminal sessions ----------------------------------------------------------------

    def login(self, host: str, user: str) -> str:
        """`user` opens a terminal session on `host`; returns its tty (the lowest free pts/N)."""
        h = self._host(host)
        if not isinstance(user, str) or not _USER_RE.match(user):
            raise InvalidRequest("user must be a Unix user name", {"user": user})
        number = 0
        while f"pts/{number}" in h.sessions:
            number += 1
        tty = f"pts/{number}"
        h.sessions[tty] = TerminalSession(user=user, tty=tty, login_at=self.now())
        self._emit(host, "ttys")
        return tty

    def logout(self, host: str, tty: str) -> None:
        """The session on `tty` ends (its messages go with it); NotFound when there is none."""
        h = self._host(host)
        if h.sessions.pop(tty, None) is None:
            raise NotFound(f"no session on {tty} of {host}", {"host": host, "tty": tty})
        self._emit(host, "ttys")

    def sessions(self, host: str) -> list[dict[str, Any]]:
        """The terminal sessions of `host` in login order, each with what was written to it."""
        return [session.to_dict() for session in self._host(host).sessions.values()]

    def tty_messages(self, host: str, tty: str) -> list[str]:
        """What was written to `tty` of `host`, in order; NotFound when no session has it."""
        session = self._host(host).sessions.get(tty)
        if session is None:
            raise NotFound(f"no session on {tty} of {host}", {"host": host, "tty": tty})
        return list(session.messages)

    # -- job tasks ------------------------------------------------------------------------

    def tasks(self, host: str, now: float | None = None) -> list[dict[str, Any]]:
        """The job tasks of `host` (of every login), in start order, with their state."""
        t = self.now() if now is None else float(now)
        tasks = sorted(self._host(host).tasks.values(), key=lambda task: task.started_at)
        return [task.to_dict(t) for task in tasks]

    # -- snapshot -------------------------------------------------------------------------

    def snapshot(self, host: str | None = None, now: float | None = None) -> dict[str, Any]:
        """The fleet (or one host) as plain JSON-ready data, for assertions and GET /fleet."""
        t = self.now() if now is None else float(now)
        names = list(self._hosts) if host is None else [self._host(host).name]
        return {"time": t, "hosts": [self._hosts[n].snapshot(t) for n in names]}

    # -- scripting ------------------------------------------------------------------------

    def _gpu_indexes(self, host: SimHost, gpu_index: int | Iterable[int]) -> tuple[int, ...]:
        raw: list[Any] = []
        if isinstance(gpu_index, int):
            raw = [gpu_index]
        elif isinstance(gpu_index, list | tuple):
            raw = list(gpu_index)
        if not raw or not all(isinstance(i, int) and not isinstance(i, bool) for i in raw):
            raise InvalidRequest("gpu must be a GPU index or a list of them", {"gpu": raw})
        for index in raw:
            if not 0 <= index < len(host.gpus):
                raise NotFound(f"{host.name} has no GPU {index}", {"host": host.name, "gpu": index})
            if host.gpus[index].removed:
                raise NotFound(
                    f"GPU {index} of {host.name} was removed", {"host": host.name, "gpu": index}
                )
        return tuple(sorted(set(raw)))

    def task_gone(self, host: str, user: str, session: str) -> None:
        """A job task of `user` that ran here before the simulator started again: its STATUS
        says `gone` (as after a reboot, the state dir kept) instead of `unknown`."""
        h = self._host(host)
        if (user, session) in h.tasks:
            return
        now = self.now()
        h.tasks[(user, session)] = SimTask(
            user, session, "screen", "", "", {}, 0, now, (), None, None, 0, frozenset(), now
        )
        self._emit(host, "tasks")

    def start_process(
        self,
        host: str,
        gpu_index: int | Iterable[int],
        user: str,
        command: str,
        used_memory_mib: int | None = 1024,
        *,
        started_at: float | None = None,
        ignore_sigterm: bool = False,
        pid: int | None = None,
        mig: int | None = None,
    ) -> int:
        """Start a process on one GPU (or several: one pid on each); returns its pid.

        `pid`: this one (it must be free) instead of the next, as when the kernel reuses a
        pid; `ignore_sigterm`: SIGTERM (the SIGNAL script's) leaves it running; `mig`: on a GPU
        split by MIG, the instance (its MIG Dev number) it runs on.
        """
        h = self._host(host)
        gpus = self._gpu_indexes(h, gpu_index)
        check_instance(h.gpus, gpus, mig)
        if not isinstance(ignore_sigterm, bool):
            raise InvalidRequest(
                "ignore_sigterm must be true or false", {"ignore_sigterm": ignore_sigterm}
            )
        if pid is not None and (
            not isinstance(pid, int) or isinstance(pid, bool) or not 0 < pid < self.pid_max
        ):
            raise InvalidRequest(f"pid must be an integer below {self.pid_max}", {"pid": pid})
        if not isinstance(user, str) or not _USER_RE.match(user):
            raise InvalidRequest("user must be a Unix user name", {"user": user})
        if (
            not isinstance(command, str)
            or not command.strip()
            or any(c in command for c in "\n\r\0")
        ):
            raise InvalidRequest("command must be a non-empty one-line command", {})
        if used_memory_mib is not None and (
            not isinstance(used_memory_mib, int)
            or isinstance(used_memory_mib, bool)
            or not 0 <= used_memory_mib <= h.gpus[gpus[0]].model.memory_total_mib
        ):
            raise InvalidRequest(
                "used_memory_mib must be an integer between 0 and the GPU's memory",
                {"used_memory_mib": used_memory_mib},
            )
        t = self.now() if started_at is None else started_at
        if pid is not None:
            if pid in h.taken_pids(t):
                raise InvalidRequest(f"pid {pid} is in use on {host}", {"pid": pid})
        else:
            pid = h.free_pid(t)
        h.scripted[pid] = SimProcess(
            pid=pid,
            user=user,
            command=command.strip(),
            gpus=gpus,
            used_memory_mib=used_memory_mib,
            started_at=t,
            scripted=True,
            ignore_sigterm=ignore_sigterm,
            mig=mig,
        )
        self._emit(host, "processes")
        return pid

    def stop_process(self, host: str, pid: int, *, exit_code: int = 137) -> None:
        """End a scripted or background process; NotFound when no such process runs.

        A task's GPU process ends its task with `exit_code` (what the task's runner writes
        when its command is killed: 137 for SIGKILL, 143 for SIGTERM)."""
        h = self._host(host)
        t = self.now()
        proc = h.scripted.pop(pid, None)
        if proc is not None and proc.ends_at is not None and proc.ends_at <= t:
            proc = None  # a task's process that ended by itself
        if proc is None:
            proc = next((p for p in h.processes(t) if p.pid == pid), None)
            if proc is None:
                raise NotFound(f"no process {pid} on {host}", {"host": host, "pid": pid})
            h.killed.add((pid, proc.started_at))
        for index in proc.gpus:
            h.gpus[index].last_stop = t
        for task in h.tasks.values():
            if task.gpu_pid == pid and task.state(t)[0] == "running":
                task.ended_at, task.exit_code = t, exit_code
                self._emit(host, "tasks")
        self._emit(host, "processes")

    def set_hang(self, host: str, seconds: float | None) -> None:
        """Commands answer after `seconds` (math.inf: never); None answers at once again."""
        h = self._host(host)
        if seconds is not None:
            if isinstance(seconds, bool) or not isinstance(seconds, int | float):
                raise InvalidRequest("seconds must be a number or null", {"seconds": seconds})
            if math.isnan(seconds) or seconds < 0:
                raise InvalidRequest("seconds must not be negative", {"seconds": seconds})
            seconds = float(seconds)
        h.hang_s = seconds
        self._emit(host, "hang")

    def set_topology(self, host: str, topology: str) -> None:
        """`nvidia-smi topo -m` on `host` prints this shape from now on."""
        if topology not in SHAPES:
            raise InvalidRequest(f"unknown topology {topology!r}", {"known": list(SHAPES)})
        self._host(host).topology = topology
        self._emit(host, "topology")

    def set_down(self, host: str, down: bool) -> None:
        """Down: the host refuses connections and drops the ones it has."""
        h = self._host(host)
        if not isinstance(down, bool):
            raise InvalidRequest("down must be true or false", {"down": down})
        h.down = down
        self._emit(host, "down")

    def set_nvidia_smi(self, host: str, mode: str) -> None:
        h = self._host(host)
        if mode not in NVIDIA_SMI_MODES:
            raise InvalidRequest(
                f"nvidia-smi mode must be one of {', '.join(NVIDIA_SMI_MODES)}", {"mode": mode}
            )
        h.nvidia_smi = cast(NvidiaSmiMode, mode)
        self._emit(host, "nvidia_smi")

    def split_gpu(self, host: str, index: int, profiles: Sequence[str]) -> list[dict[str, Any]]:
        """Split GPU `index` into MIG instances of `profiles` (e.g. ["3g.40gb", "3g.40gb"]),
        replacing any earlier split; an empty list ends MIG mode. Returns the instances."""
        h = self._host(host)
        self._gpu_indexes(h, index)
        gpu = h.gpus[index]
        if not isinstance(profiles, list | tuple):
            raise InvalidRequest('profiles must be a list such as ["3g.40gb"]')
        gpu.mig = (
            make_instances(
                f"{self.seed}/{host}", index, gpu.model.name, gpu.model.memory_total_mib, profiles
            )
            if profiles
            else ()
        )
        self._emit(host, "gpus")
        return [asdict(m) for m in gpu.mig]

    def set_gpu_fault(self, host: str, index: int, fault: str) -> None:
        """A GPU fails (lost, ecc, row_remap_pending), throttles (thermal), runs on a narrow
        PCIe link (pcie), or is healthy again (ok): see sim/gpu_faults.py."""
        h = self._host(host)
        self._gpu_indexes(h, index)
        if fault not in GPU_FAULTS:
            raise InvalidRequest(f"fault must be one of {', '.join(GPU_FAULTS)}", {"fault": fault})
        h.gpus[index].fault = fault
        self._emit(host, "gpus")

    def remove_gpu(self, host: str, index: int) -> None:
        """The GPU disappears from nvidia-smi's output (the others keep their index)."""
        h = self._host(host)
        self._gpu_indexes(h, index)
        h.gpus[index].removed = True
        self._emit(host, "gpus")
