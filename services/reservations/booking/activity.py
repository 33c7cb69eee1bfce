"""What runs on the GPUs right now, as the monitor last said, for booking decisions made now:
a warning when someone books a GPU in use, and idle GPUs first when "any N" starts now.

Learnt from the monitor's `processes.observed` (each the whole truth of one host) and
`host.sampled` (utilisation) events, kept in memory only: it is about now, and one poll after a
restart it is whole again. A host not heard from for `stale_after` is unknown, not idle.
No I/O here: the handlers hand in the events' data.
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

# The order GPUs are offered in when a slot starts now: lower first. Unknown (no fresh word
# from the host) sits between idle and in use: it may well be idle, but we cannot say.
IDLE, UNKNOWN, IN_USE = 0, 1, 2
Rank = tuple[int, float]
UNKNOWN_RANK: Rank = (UNKNOWN, 0.0)


@dataclass(frozen=True)
class SeenProcess:
    pid: int
    user: str | None
    command: str

    def to_dict(self) -> dict[str, Any]:
        return {"pid": self.pid, "user": self.user, "command": self.command}


@dataclass(frozen=True)
class _HostSnapshot:
    observed_at: datetime
    processes: Mapping[str, tuple[SeenProcess, ...]]  # by GPU uuid


def is_allowed(user: str | None, command: str, allow: Iterable[tuple[str, str]]) -> bool:
    """The `[violations] allow` rule (user:command, fnmatch, on the executable's base name):
    a display server on a workstation GPU is no reason to warn anyone."""
    if user is None:
        return False
    name = posixpath.basename(command.split()[0]) if command.split() else ""
    return any(
        fnmatch.fnmatchcase(user, allowed_user) and fnmatch.fnmatchcase(name, allowed_command)
        for allowed_user, allowed_command in allow
    )


def starts_now(start: datetime, now: datetime, window: timedelta) -> bool:
    """A slot starting within `window` of now counts as starting now."""
    return start <= now + window


class ActivityBoard:
    """The latest processes per host and utilisation per GPU, each replaced only by newer."""

    def __init__(
        self,
        stale_after: timedelta,
        now_window: timedelta,
        allow: Iterable[tuple[str, str]] = (),
    ) -> None:
        self.stale_after = stale_after
        self.now_window = now_window  # a slot starting this soon "starts now"
        self.allow = tuple(allow)
        self._hosts: dict[str, _HostSnapshot] = {}
        self._utilization: dict[str, tuple[datetime, float | None]] = {}

    def on_processes_observed(self, data: Mapping[str, Any]) -> None:
        at = _time(data["observed_at"])
        known = self._hosts.get(data["host"])
        if known is not None and known.observed_at >= at:
            return  # late or redelivered
        by_gpu: dict[str, list[SeenProcess]] = {}
        for process in data["processes"]:
            if is_allowed(process.get("user"), process["command"], self.allow):
                continue
            seen = SeenProcess(int(process["pid"]), process.get("user"), process["command"])
            by_gpu.setdefault(process["gpu_uuid"], []).append(seen)
        processes = {uuid: tuple(found) for uuid, found in by_gpu.items()}
        self._hosts[data["host"]] = _HostSnapshot(at, processes)

    def on_host_sampled(self, data: Mapping[str, Any]) -> None:
        at = _time(data["sampled_at"])
        for gpu in data["gpus"]:
            known = self._utilization.get(gpu["uuid"])
            if known is None or known[0] < at:
                self._utilization[gpu["uuid"]] = (at, gpu.get("utilization_gpu_percent"))

    def processes(self, host: str, uuid: str, now: datetime) -> tuple[SeenProcess, ...] | None:
        """The processes on a GPU now; None when its host has not been heard from lately."""
        snapshot = self._hosts.get(host)
        if snapshot is None or now - snapshot.observed_at > self.stale_after:
            return None
        return snapshot.processes.get(uuid, ())

    def rank(self, host: str, uuid: str, now: datetime) -> Rank:
        """Idle (no process) first, then unknown, then in use; each by utilisation."""
        processes = self.processes(host, uuid, now)
        if processes is None:
            return UNKNOWN_RANK
        sampled = self._utilization.get(uuid)
        fresh = sampled is not None and now - sampled[0] <= self.stale_after
        utilization = (sampled[1] if fresh and sampled else None) or 0.0
        return (IN_USE if processes else IDLE, utilization)

    def ranks(self, gpus: Iterable[tuple[str, str]], now: datetime) -> dict[str, Rank]:
        """rank() of each (host, uuid), by uuid."""
        return {uuid: self.rank(host, uuid, now) for host, uuid in gpus}

    def warnings(
        self,
        reservation: Mapping[str, Any],
        now: datetime,
    ) -> list[dict[str, Any]]:
        """One warning per GPU of a reservation that starts now on which someone other than its
        owner and guests runs processes now (who, which). None for one starting later: by then the
        picture will have changed, and a process still there then is a violation."""
        start, end = _time(reservation["start"]), _time(reservation["end"])
        if not starts_now(start, now, self.now_window) or end <= now:
            return []
        return in_use_warnings(
            reservation.get("gpus") or (),
            lambda host, uuid: self.processes(host, uuid, now),
            {reservation["owner"], *(reservation.get("guests") or ())},
        )


def in_use_warnings(
    gpus: Sequence[Mapping[str, Any]],
    processes_of: Callable[[str, str], Sequence[SeenProcess] | None],
    welcome: Collection[str],
) -> list[dict[str, Any]]:
    """The warnings for `gpus` ({uuid, host, index}) given `processes_of(host, uuid)`: the
    processes of anyone not `welcome` (the owner and guests, who may use the GPUs)."""
    found: list[dict[str, Any]] = []
    for gpu in gpus:
        processes = processes_of(gpu["host"], gpu["uuid"]) or ()
        others = [p for p in processes if p.user not in welcome]
        if not others:
            continue
        place = f"{gpu['host']}:{gpu.get('index')}"
        users = sorted({p.user or "an unknown user" for p in others})
        listed = ", ".join(f"{p.command} (pid {p.pid}, {p.user or '?'})" for p in others)
        found.append(
            {
                "gpu_uuid": gpu["uuid"],
                "host": gpu["host"],
                "gpu_index": gpu.get("index"),
                "processes": [p.to_dict() for p in others],
                "message": f"{place} is in use now by {', '.join(users)}: {listed}. "
                "Ask them to stop before you start; while your reservation runs, their "
                "processes are violations.",
            }
        )
    return found


def _time(value: datetime | str) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(value)
