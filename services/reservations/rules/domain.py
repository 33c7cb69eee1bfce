"""The plain data the reservation rules work on. No I/O: the store builds these from rows.

Times are timezone-aware UTC datetimes; every interval is half-open, [start, end).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, time, timedelta
from typing import Any


@dataclass(frozen=True, order=True)
class Interval:
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"interval ends ({self.end}) before it starts ({self.start})")

    @property
    def duration(self) -> timedelta:
        return self.end - self.start

    def overlaps(self, other: Interval) -> bool:
        return self.start < other.end and other.start < self.end

    def to_dict(self) -> dict[str, str]:
        return {"start": self.start.isoformat(), "end": self.end.isoformat()}


@dataclass(frozen=True)
class Gpu:
    """A GPU (a reservable resource), known from `gpu.discovered` events."""

    uuid: str
    host: str
    index: int
    name: str = ""
    memory_total_mib: float | None = None
    present: bool = True
    mig_parent_uuid: str | None = None  # a MIG instance: the GPU it is part of
    health: str = "ok"  # ok, degraded or failed (gpu.health_changed): failed takes no booking
    health_reason: str | None = None


@dataclass(frozen=True)
class WeeklyWindow:
    """Days of the week and a time of day, read in the rule's time zone.

    `days` are the days a window *starts* on: 0 = Monday ... 6 = Sunday. When `end <= start`
    the window runs over midnight into the next day (22:00-06:00); `start == end` is 24 h.
    """

    days: frozenset[int]
    start: time
    end: time


@dataclass(frozen=True)
class Limits:
    """Optional limits of one rule; a reservation the rule would allow must respect them."""

    max_gpus: int | None = None  # GPUs (of this rule) held at once by the owner
    max_duration: timedelta | None = None  # length of one reservation
    max_gpu_hours_per_week: float | None = None  # per week (Monday 00:00, the rule's zone)

    @property
    def any(self) -> bool:
        return (
            self.max_gpus is not None
            or self.max_duration is not None
            or self.max_gpu_hours_per_week is not None
        )


@dataclass(frozen=True)
class IdlePolicy:
    """When a reservation granted by a rule counts as idle, and what happens then (minutes may
    be fractions: tests use seconds). See `idle.py`."""

    below_util_percent: float  # every GPU under this utilisation ...
    below_memory_mib: float  # ... and under this much memory used ...
    for_minutes: float  # ... for this long: idle, the owner is told
    grace_minutes: float  # no answer for this long after the notice: released
    snooze_minutes: float  # "I still need it": no notice for this long

    def to_dict(self) -> dict[str, float]:
        return dict(vars(self))


@dataclass(frozen=True)
class AccessRule:
    """Grants subjects (users, groups) the use of objects (GPUs) in a period and windows.

    Objects: every GPU when `all_gpus`, else the GPUs of `hosts` plus the GPUs in `gpus`;
    with `labels` (a selector, `services.shared.gpu_labels`) only those of them that carry
    the labels, or, when it names no other object, every GPU that does.
    No windows: at any time within [valid_from, valid_until).
    """

    id: int
    name: str
    valid_from: datetime
    valid_until: datetime | None = None
    users: frozenset[str] = frozenset()
    groups: frozenset[str] = frozenset()
    all_gpus: bool = False
    hosts: frozenset[str] = frozenset()
    gpus: frozenset[str] = frozenset()
    labels: tuple[str, ...] = ()  # e.g. ("model=A100-80GB",): every term must hold
    windows: tuple[WeeklyWindow, ...] = ()
    timezone: str = "UTC"
    limits: Limits = field(default_factory=Limits)
    idle_policy: IdlePolicy | None = None  # None: reservations it grants are never released


@dataclass(frozen=True)
class Member:
    """Someone who wants to use GPUs, as the rules see them."""

    username: str
    groups: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Booking:
    """An active (not cancelled) reservation, as conflict, limit and planning checks see it."""

    id: int
    owner: str
    gpus: frozenset[str]
    start: datetime
    end: datetime

    @property
    def interval(self) -> Interval:
        return Interval(self.start, self.end)


@dataclass(frozen=True)
class Refusal:
    """One reason a request was refused, as data the UI and CLI show verbatim.

    `code` is one of: not_allowed, limit_max_gpus, limit_max_duration, limit_quota, conflict,
    invalid (bad times, title, duration bounds), not_offered (a GPU of a host removed from the
    inventory), maintenance (a GPU drained by an admin for the time asked: `rules.maintenance`),
    forbidden (the actor may not do this).
    """

    code: str
    message: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, **self.details}
