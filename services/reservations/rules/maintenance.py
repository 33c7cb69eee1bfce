"""Maintenance windows (pure): an admin drains a host, or some of its GPUs, from a moment (now
or later) until a moment or until further notice, with a reason.

Nobody may book a drained GPU inside its window: a request that overlaps one is refused with
the window's reason (`maintenance_refusals`, code `maintenance`), the earliest-slot search
treats the window as busy (`busy_by_gpu`), and the bookings already on its GPUs
(`covered_gpus`) in its time are listed so that their owners are told at once. What becomes
of those bookings is the admin's choice (`BOOKING_CHOICES`): kept by default, cancelled or
moved only when asked.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from services.reservations.rules.domain import Gpu, Interval, Refusal
from services.reservations.rules.refusals import Current

# What becomes of the bookings a new window overlaps: keep (the default: their owners are
# told and choose), cancel, or move to the earliest alternative slot.
BOOKING_CHOICES = ("keep", "cancel", "move")
MAX_REASON = 500
# An open-ended window (no end yet) counts as busy this far ahead in a slot search.
OPEN_ENDED_HORIZON = timedelta(weeks=520)


@dataclass(frozen=True)
class Window:
    """One maintenance window. `indices` None: the whole host; `end` None: until an admin
    ends it."""

    id: int
    host: str
    indices: frozenset[int] | None
    start: datetime
    end: datetime | None
    reason: str
    created_by: str = ""

    def covers(self, gpu: Gpu) -> bool:
        return gpu.host == self.host and (self.indices is None or gpu.index in self.indices)

    def overlaps(self, start: datetime, end: datetime) -> bool:
        """Does the window touch [start, end)? Half-open, like every interval."""
        return self.start < end and (self.end is None or start < self.end)

    def active_at(self, moment: datetime) -> bool:
        return self.start <= moment and (self.end is None or moment < self.end)

    @property
    def target(self) -> str:
        """`host` or `host:0,1`, as the CLI names it."""
        if self.indices is None:
            return self.host
        return f"{self.host}:{','.join(str(i) for i in sorted(self.indices))}"

    def until(self, far: datetime) -> datetime:
        return far if self.end is None else self.end


def _when(moment: datetime | None) -> str:
    return "further notice" if moment is None else moment.strftime("%Y-%m-%d %H:%M UTC")


def window_refusals(
    start: datetime, end: datetime | None, reason: str, choice: str, now: datetime
) -> list[Refusal]:
    """What is wrong with a new window's fields (an empty list: nothing)."""
    found = []
    if not 1 <= len(reason.strip()) <= MAX_REASON:
        found.append(
            Refusal(
                "invalid", f"the reason must be 1 to {MAX_REASON} characters", {"field": "reason"}
            )
        )
    if end is not None and end <= start:
        found.append(Refusal("invalid", "the window must end after it starts", {"field": "end"}))
    if end is not None and end <= now:
        found.append(Refusal("invalid", "the window is over already", {"field": "end"}))
    if choice not in BOOKING_CHOICES:
        found.append(
            Refusal(
                "invalid",
                f"bookings must be one of {', '.join(BOOKING_CHOICES)}",
                {"field": "bookings"},
            )
        )
    return found


def target_refusals(
    host: str, indices: frozenset[int] | None, gpus: Iterable[Gpu]
) -> list[Refusal]:
    """A window names a host Warden knows GPUs of, and only GPUs that host has."""
    known = {gpu.index for gpu in gpus if gpu.host == host}
    if not known:
        return [Refusal("invalid", f"Warden knows no GPU on {host}", {"field": "host"})]
    missing = sorted((indices or frozenset()) - known)
    if missing:
        names = ", ".join(f"{host}:{i}" for i in missing)
        return [Refusal("invalid", f"{host} has no GPU {names}", {"field": "gpus"})]
    return []


def covered_gpus(window: Window, gpus: Iterable[Gpu]) -> list[Gpu]:
    return sorted((g for g in gpus if window.covers(g)), key=lambda g: (g.host, g.index))


def maintenance_refusals(
    windows: Sequence[Window], gpus: Iterable[Gpu], start: datetime, end: datetime
) -> list[Refusal]:
    """One refusal per window that drains a requested GPU over [start, end), with its reason."""
    wanted = list(gpus)
    found = []
    for window in sorted(windows, key=lambda w: (w.start, w.id)):
        if not window.overlaps(start, end):
            continue
        hit = covered_gpus(window, wanted)
        if not hit:
            continue
        names = ", ".join(f"{g.host}:{g.index}" for g in hit)
        found.append(
            Refusal(
                "maintenance",
                f"GPU {names} is drained for maintenance from {_when(window.start)} to "
                f"{_when(window.end)}: {window.reason}",
                window_details(window) | {"gpus": [g.uuid for g in hit]},
            )
        )
    return found


def window_details(window: Window) -> dict[str, Any]:
    return {
        "maintenance_id": window.id,
        "host": window.host,
        "indices": None if window.indices is None else sorted(window.indices),
        "start": window.start.isoformat(),
        "end": None if window.end is None else window.end.isoformat(),
        "reason": window.reason,
    }


def busy_by_gpu(
    windows: Sequence[Window], gpus: Iterable[Gpu], start: datetime, end: datetime
) -> dict[str, list[Interval]]:
    """Per GPU uuid, the parts of [start, end) its windows drain (for the slot search)."""
    busy: dict[str, list[Interval]] = {}
    candidates = list(gpus)
    for window in windows:
        if not window.overlaps(start, end):
            continue
        span = Interval(max(window.start, start), min(window.until(end), end))
        for gpu in covered_gpus(window, candidates):
            busy.setdefault(gpu.uuid, []).append(span)
    return busy


def gained_refusals(
    windows: Sequence[Window], gpus: Iterable[Gpu], was: Current, start: datetime, end: datetime
) -> list[Refusal]:
    """A booking moved or made longer: refused where the time it gains is drained (what it
    held already is the admin's to decide: it was kept)."""
    wanted = list(gpus)
    gained = [(start, min(end, was.start)), (max(start, was.end), end)]
    found: dict[tuple[int, str], Refusal] = {}
    for low, high in gained:
        if low < high:
            for refusal in maintenance_refusals(windows, wanted, low, high):
                found.setdefault((refusal.details["maintenance_id"], refusal.message), refusal)
    return list(found.values())
