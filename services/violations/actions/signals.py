"""The `terminate` and `kill` handlers: end the offending processes, never a reused pid.

`terminate` sends SIGTERM to each process, waits `term_grace_s`, then sends SIGKILL to those
still running (the same process: same owner, same start time); `kill` sends SIGKILL at once.
Every signal goes through the SIGNAL script (`remote.signal_command`), which checks on the
host that the pid still belongs to the offender and started when the monitor saw it start:
a pid the kernel gave to another process meanwhile is left alone, and so is a process whose
start time the monitor could not tell.

One outcome per pid (target `host:pid 4242`): "terminated", "killed after SIGTERM was
ignored", "killed", "already gone" (ok), or "not killed: ..." with the reason (not ok).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from services.shared.config import HostConfig, ViolationSettings
from services.violations.actions.base import ActionOutcome, Alert, Process
from services.violations.actions.remote import (
    HostShell,
    RemoteCommandFailed,
    login_for,
    require,
)
from services.violations.scripts import SignalResult, parse_signal_result, signal_command

Sleep = Callable[[float], Awaitable[object]]


def _target(host: HostConfig, process: Process) -> str:
    return f"{host.name}:pid {process.pid}"


def _stamp(moment: datetime | None) -> str:
    if moment is None:
        return "at an unknown time"
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _not_killed(process: Process, answer: SignalResult, offender: str) -> str:
    owner = answer.user or "an unknown user"
    if process.started_at is None:
        return (
            f"not killed: the start time of pid {process.pid} is unknown, so a reused pid "
            f"cannot be ruled out (it belongs to {owner}, started {_stamp(answer.started_at)})"
        )
    if answer.user == offender:
        return (
            f"not killed: pid {process.pid} now belongs to another process of {owner} "
            f"(started {_stamp(answer.started_at)}, not {_stamp(process.started_at)})"
        )
    return (
        f"not killed: pid {process.pid} now belongs to {owner} "
        f"(started {_stamp(answer.started_at)})"
    )


class _Signaller:
    def __init__(
        self, shell: HostShell, host: HostConfig, alert: Alert, settings: ViolationSettings
    ) -> None:
        self.shell = shell
        self.host = host
        self.offender = alert.offender
        self.login, self.sudo = login_for(host, settings, alert.offender)

    async def send(self, process: Process, signal: str) -> SignalResult | RemoteCommandFailed:
        command = signal_command(process.pid, self.offender, process.started_at, signal, self.sudo)
        try:
            result = await self.shell.run(self.host, self.login, command)
            answer = require(
                parse_signal_result(result.stdout),
                result,
                self.host.name,
                self.login,
                f"SIG{signal}",
            )
        except RemoteCommandFailed as err:
            return err
        if answer.status in ("failed", "invalid"):
            said = (result.stderr.strip().splitlines() or [answer.status])[-1]
            reason = f"SIG{signal} failed as {self.login}: {said}"
            return RemoteCommandFailed(
                f"{self.host.name}: {reason}",
                {"host": self.host.name, "login": self.login, "reason": reason},
            )
        return answer

    async def send_all(
        self, processes: list[Process], signal: str
    ) -> list[SignalResult | RemoteCommandFailed]:
        return list(await asyncio.gather(*(self.send(p, signal) for p in processes)))


def _failure(answer: SignalResult | RemoteCommandFailed) -> str:
    if isinstance(answer, RemoteCommandFailed):
        return f"not killed: {answer.message}"
    return f"not killed: unexpected answer {answer.status!r}"


def _unique(alert: Alert) -> list[Process]:
    """The alert's processes, each pid once (one process may use several GPUs)."""
    seen: dict[int, Process] = {}
    for process in alert.processes:
        seen.setdefault(process.pid, process)
    return list(seen.values())


def _no_processes(host: HostConfig) -> list[ActionOutcome]:
    return [ActionOutcome(host.name, False, "the alert lists no process")]


async def terminate(
    shell: HostShell,
    host: HostConfig,
    alert: Alert,
    settings: ViolationSettings,
    *,
    sleep: Sleep = asyncio.sleep,
) -> list[ActionOutcome]:
    """SIGTERM each offending process; SIGKILL those still running after `term_grace_s`."""
    processes = _unique(alert)
    if not processes:
        return _no_processes(host)
    signaller = _Signaller(shell, host, alert, settings)
    outcomes: dict[int, ActionOutcome] = {}
    pending: list[Process] = []
    for process, answer in zip(processes, await signaller.send_all(processes, "TERM"), strict=True):
        target = _target(host, process)
        if isinstance(answer, SignalResult) and answer.status == "signalled":
            pending.append(process)
        elif isinstance(answer, SignalResult) and answer.status == "gone":
            outcomes[process.pid] = ActionOutcome(target, True, "already gone")
        elif isinstance(answer, SignalResult) and answer.status == "mismatch":
            outcomes[process.pid] = ActionOutcome(
                target, False, _not_killed(process, answer, alert.offender)
            )
        else:
            outcomes[process.pid] = ActionOutcome(target, False, _failure(answer))
    if pending:
        await sleep(settings.term_grace_s)
        # SIGKILL through the same check: "gone" or a new owner means SIGTERM did its work.
        for process, answer in zip(pending, await signaller.send_all(pending, "KILL"), strict=True):
            target = _target(host, process)
            if isinstance(answer, SignalResult) and answer.status in ("gone", "mismatch"):
                outcomes[process.pid] = ActionOutcome(target, True, "terminated")
            elif isinstance(answer, SignalResult) and answer.status == "signalled":
                outcomes[process.pid] = ActionOutcome(
                    target, True, "killed after SIGTERM was ignored"
                )
            else:
                outcomes[process.pid] = ActionOutcome(
                    target, False, "SIGTERM sent, then " + _failure(answer)
                )
    return [outcomes[p.pid] for p in processes]


async def kill(
    shell: HostShell, host: HostConfig, alert: Alert, settings: ViolationSettings
) -> list[ActionOutcome]:
    """SIGKILL each offending process at once."""
    processes = _unique(alert)
    if not processes:
        return _no_processes(host)
    signaller = _Signaller(shell, host, alert, settings)
    outcomes = []
    for process, answer in zip(processes, await signaller.send_all(processes, "KILL"), strict=True):
        target = _target(host, process)
        if isinstance(answer, SignalResult) and answer.status == "signalled":
            outcomes.append(ActionOutcome(target, True, "killed"))
        elif isinstance(answer, SignalResult) and answer.status == "gone":
            outcomes.append(ActionOutcome(target, True, "already gone"))
        elif isinstance(answer, SignalResult) and answer.status == "mismatch":
            outcomes.append(
                ActionOutcome(target, False, _not_killed(process, answer, alert.offender))
            )
        else:
            outcomes.append(ActionOutcome(target, False, _failure(answer)))
    return outcomes
