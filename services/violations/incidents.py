"""Incidents and their escalation: what changes when a host's processes are seen (pure).

One incident per (offender, host, GPU, reservation): opened when first seen, updated while it
persists (its processes come and go), resolved when none of its processes is left or the
reservation ends. Escalation steps are due `after_s` after the incident opened; each is taken
at most once, and none after the incident is resolved.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from services.shared.config import EscalationStep
from services.violations.detector import Offence, SeenProcess

RESOLVED_GONE = "no offending process left"
RESOLVED_RESERVATION_ENDED = "the reservation ended"
RESOLVED_RESERVATION_CANCELLED = "the reservation was cancelled"


@dataclass(frozen=True)
class Incident:
    id: str
    host: str
    gpu_uuid: str
    gpu_index: int | None
    offender: str
    mode: str
    reservation_id: int | None
    owner: str | None
    reservation_start: datetime | None
    reservation_end: datetime | None
    opened_at: datetime
    since: datetime
    last_seen_at: datetime
    processes: tuple[SeenProcess, ...]
    steps: tuple[EscalationStep, ...]
    steps_done: frozenset[int] = frozenset()
    resolved_at: datetime | None = None
    resolve_reason: str | None = None

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (self.offender, self.host, self.gpu_uuid, self.reservation_id)

    @property
    def is_open(self) -> bool:
        return self.resolved_at is None

    def step_at(self, index: int) -> datetime:
        return self.opened_at + timedelta(seconds=self.steps[index].after_s)

    def due_steps(self, now: datetime) -> list[int]:
        """Indexes of the steps due by `now` and not taken yet (none once resolved)."""
        if not self.is_open:
            return []
        return [
            i for i in range(len(self.steps)) if i not in self.steps_done and self.step_at(i) <= now
        ]

    def next_due_at(self) -> datetime | None:
        pending = [self.step_at(i) for i in range(len(self.steps)) if i not in self.steps_done]
        return min(pending) if pending and self.is_open else None

    def context(self) -> dict[str, Any]:
        """The data every violation.* event carries."""
        return {
            "incident_id": self.id,
            "mode": self.mode,
            "host": self.host,
            "gpu_uuid": self.gpu_uuid,
            "gpu_index": self.gpu_index,
            "offender": self.offender,
            "pids": [p.pid for p in self.processes],
            "commands": [p.command for p in self.processes],
            "processes": [process_data(p) for p in self.processes],
            "reservation_id": self.reservation_id,
            "owner": self.owner,
            "reservation_start": _iso(self.reservation_start),
            "reservation_end": _iso(self.reservation_end),
            "since": self.since.isoformat(),
        }

    def escalation(self, index: int) -> dict[str, Any]:
        """The data of `violation.escalated` for step `index`."""
        step = self.steps[index]
        following = index + 1 if index + 1 < len(self.steps) else None
        return {
            **self.context(),
            "step": step.text,
            "step_index": index,
            "action": step.action,
            "recipients": list(step.recipients),
            "after_s": step.after_s,
            "next_step": None if following is None else self.steps[following].text,
            "next_at": None if following is None else self.step_at(following).isoformat(),
            "upcoming": [
                {
                    "step": self.steps[later].text,
                    "action": self.steps[later].action,
                    "at": self.step_at(later).isoformat(),
                }
                for later in range(index + 1, len(self.steps))
            ],
        }


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def process_data(process: SeenProcess) -> dict[str, Any]:
    return {
        "pid": process.pid,
        "command": process.command,
        "started_at": _iso(process.started_at),
        "used_memory_mib": process.used_memory_mib,
    }


def open_incident(
    incident_id: str,
    offence: Offence,
    observed_at: datetime,
    *,
    mode: str,
    steps: Sequence[EscalationStep],
    gpu_index: int | None,
) -> Incident:
    held = offence.holding
    started = [p.started_at for p in offence.processes if p.started_at is not None]
    return Incident(
        id=incident_id,
        host=offence.host,
        gpu_uuid=offence.gpu_uuid,
        gpu_index=gpu_index,
        offender=offence.offender,
        mode=mode,
        reservation_id=None if held is None else held.reservation_id,
        owner=None if held is None else held.owner,
        reservation_start=None if held is None else held.start,
        reservation_end=None if held is None else held.end,
        opened_at=observed_at,
        # Since when the GPU is misused: the reservation's start if the process is older.
        since=max([min(started, default=observed_at), *([held.start] if held else [])]),
        last_seen_at=observed_at,
        processes=offence.processes,
        steps=tuple(steps),
    )


@dataclass
class Reconciled:
    opened: list[Offence] = field(default_factory=list)
    changed: list[Incident] = field(default_factory=list)  # with their new processes
    seen: list[Incident] = field(default_factory=list)  # the same processes, seen later
    resolved: list[Incident] = field(default_factory=list)  # resolved by this snapshot


def _identity(processes: Iterable[SeenProcess]) -> set[int]:
    # By pid only: a start time derived from `etimes` may move by a second between polls.
    return {p.pid for p in processes}


def reconcile(
    open_on_host: Iterable[Incident], offences: Sequence[Offence], observed_at: datetime
) -> Reconciled:
    """Compare one host's offences at `observed_at` with its open incidents.

    A snapshot older than what an incident last saw changes nothing of that incident (events
    may arrive late or twice).
    """
    result = Reconciled()
    by_key = {offence.key: offence for offence in offences}
    seen_keys: set[tuple[str, str, str, int | None]] = set()
    for incident in open_on_host:
        seen_keys.add(incident.key)
        if observed_at <= incident.last_seen_at:
            continue
        offence = by_key.get(incident.key)
        if offence is None:
            result.resolved.append(
                replace(incident, resolved_at=observed_at, resolve_reason=RESOLVED_GONE)
            )
        elif _identity(offence.processes) != _identity(incident.processes):
            result.changed.append(
                replace(incident, processes=offence.processes, last_seen_at=observed_at)
            )
        else:
            result.seen.append(replace(incident, last_seen_at=observed_at))
    result.opened = [o for o in offences if o.key not in seen_keys]
    return result
