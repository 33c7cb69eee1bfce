"""What the queue scheduler (`services.jobs.queue.scheduler`) reads and answers, as plain data: a
snapshot of the GPUs, their bookings, the queue and the running queued jobs (`QueueState`), and
the decisions of one pass (`Decision`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from services.shared.topology import PACK, Topology

# --- the scheduler's view --------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU as the scheduler sees it."""

    uuid: str
    host: str
    index: int | None
    busy: bool  # processes seen by the monitor, or held by a running Warden job
    labels: tuple[str, ...] = ()  # from the hardware (services.shared.gpu_labels)
    failed: str | None = None  # why it failed (gpu.health_changed): never placed on


@dataclass(frozen=True, slots=True)
class Booking:
    """A reservation on one GPU."""

    reservation_id: int
    owner: str
    guests: frozenset[str]
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Demand:
    """What one task of a queued job needs: named GPUs, or any `gpu_count` on one host."""

    index: int
    host: str | None
    gpus: tuple[str, ...] = ()  # named GPUs (uuids)
    gpu_count: int | None = None  # or any this many on one host (`host`, or any when None)
    labels: tuple[str, ...] = ()  # with gpu_count: only GPUs that meet this label selector


@dataclass(frozen=True, slots=True)
class QueuedJob:
    job_id: int
    owner: str
    enqueued_at: datetime
    demands: tuple[Demand, ...]
    max_runtime: timedelta | None = None


@dataclass(frozen=True, slots=True)
class RunningJob:
    job_id: int
    owner: str
    gpus: frozenset[str]
    preemptible: bool  # started from the queue
    interrupted_for: frozenset[int] = frozenset()  # reservation ids already signalled
    lead: timedelta | None = None  # its own hand-back grace (None: QueueState.preempt_lead)


@dataclass(frozen=True, slots=True)
class QueueState:
    now: datetime
    gpus: Mapping[str, Gpu]  # uuid -> GPU
    bookings: Mapping[str, Sequence[Booking]]  # uuid -> its bookings, sorted by start
    queue: Sequence[QueuedJob]
    running: Sequence[RunningJob] = ()
    min_window: timedelta = timedelta(hours=1)  # a job's window without max_runtime
    preempt_lead: timedelta = timedelta(minutes=5)
    avoid: Mapping[int, frozenset[str]] = field(default_factory=dict)  # job id -> GPUs refused
    # Anti-starvation (see the scheduler's docstring): None keeps nothing for waiting jobs.
    hold_after: timedelta | None = None
    # Locality (`placement.py`): each host's GPU interconnect, and pack or spread.
    topologies: Mapping[str, Topology] = field(default_factory=dict)
    packing: str = PACK
    # Maintenance windows, uuid -> (start, end; None: open-ended): no work placed into one.
    drained: Mapping[str, Sequence[tuple[datetime, datetime | None]]] = field(default_factory=dict)
    # The queue's order as job ids (fair share, `services.jobs.queue.fairshare`); None: the
    # scheduler's own round robin (`queue_order`). Jobs of `queue` not named go last.
    order: Sequence[int] | None = None


# --- what one pass decides ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Start:
    job_id: int
    placement: Mapping[int, tuple[str, tuple[str, ...]]]  # task index -> (host, GPU uuids)


@dataclass(frozen=True, slots=True)
class Interrupt:
    job_id: int
    reservation_id: int
    reservation_start: datetime


@dataclass(frozen=True, slots=True)
class Kill:
    job_id: int
    reservation_id: int


@dataclass(frozen=True, slots=True)
class Waiting:
    """Why a queued job did not start this pass (for the user)."""

    job_id: int
    reason: str


Decision = Start | Interrupt | Kill | Waiting
