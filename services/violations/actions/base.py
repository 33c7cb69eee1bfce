"""What every handler receives (an `Alert`) and returns (one `ActionOutcome` per target: the
notifications' delivery outcome, which the e-mail and webhook senders answer)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from services.notifications.delivery.outcome import ActionOutcome

__all__ = ["ActionOutcome", "Alert", "Process", "Upcoming"]


def _time(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


@dataclass(frozen=True)
class Process:
    pid: int
    command: str
    started_at: datetime | None = None  # host clock; None when the monitor could not tell
    used_memory_mib: float | None = None


@dataclass(frozen=True)
class Upcoming:
    step: str  # "300s terminate"
    action: str
    at: datetime


@dataclass(frozen=True)
class Alert:
    """One escalation step of one incident (the data of a `violation.escalated` event)."""

    incident_id: str
    host: str
    gpu_uuid: str
    gpu_index: int | None
    offender: str
    processes: tuple[Process, ...]
    since: datetime
    mode: str = "reservations"
    reservation_id: int | None = None
    owner: str | None = None
    reservation_start: datetime | None = None
    reservation_end: datetime | None = None
    step: str = ""
    step_index: int = 0
    action: str = ""
    recipients: tuple[str, ...] = ()
    next_step: str | None = None
    next_at: datetime | None = None
    upcoming: tuple[Upcoming, ...] = ()

    @classmethod
    def from_event(cls, data: Mapping[str, Any]) -> Alert:
        """From a validated violation.* event's data (times as ISO-8601 strings)."""
        processes = data.get("processes") or [
            {"pid": pid, "command": command}
            for pid, command in zip(data["pids"], data["commands"], strict=False)
        ]
        since = _time(data["since"])
        assert since is not None
        return cls(
            incident_id=data["incident_id"],
            host=data["host"],
            gpu_uuid=data["gpu_uuid"],
            gpu_index=data.get("gpu_index"),
            offender=data["offender"],
            processes=tuple(
                Process(
                    pid=int(p["pid"]),
                    command=p.get("command", ""),
                    started_at=_time(p.get("started_at")),
                    used_memory_mib=p.get("used_memory_mib"),
                )
                for p in processes
            ),
            since=since,
            mode=data.get("mode", "reservations"),
            reservation_id=data.get("reservation_id"),
            owner=data.get("owner"),
            reservation_start=_time(data.get("reservation_start")),
            reservation_end=_time(data.get("reservation_end")),
            step=data.get("step", ""),
            step_index=int(data.get("step_index", 0)),
            action=data.get("action", ""),
            recipients=tuple(data.get("recipients") or ()),
            next_step=data.get("next_step"),
            next_at=_time(data.get("next_at")),
            upcoming=tuple(
                Upcoming(u["step"], u["action"], _time(u["at"]) or since)
                for u in data.get("upcoming") or ()
            ),
        )

    @property
    def steps_ahead(self) -> tuple[Upcoming, ...]:
        """The later steps; from `next_step` alone when the event carried no `upcoming`."""
        if self.upcoming or self.next_step is None:
            return self.upcoming
        words = self.next_step.split()
        action = words[1] if len(words) > 1 else self.next_step
        return (Upcoming(self.next_step, action, self.next_at or self.since),)

    @property
    def gpu_label(self) -> str:
        return f"GPU {self.gpu_index}" if self.gpu_index is not None else f"GPU {self.gpu_uuid}"
