"""Fair share (pure): the order in which the queue scheduler looks at waiting jobs.

Usage. A user's usage is the GPU-hours of their jobs and reservations (`Usage` periods), each
hour weighted by 2^(-age / half_life): an hour used one half-life ago counts half. Only the
past counts (a running job or reservation up to now; a future booking not yet).

Shares. Every user with queued jobs or usage has a weight: the largest weight of their groups
(`weights`, group -> weight), 1 when none of their groups has one. Their share is their
weight over the sum of everyone's weights (equal shares by default).

Order (`fair_order`). Users take turns by their usage against their share, `usage / share`
(lowest first): the user lowest picks their oldest job, that job's expected GPU-hours (its
GPUs times its window) are charged to them, and the next turn goes to whoever is lowest then.
So a light user's job goes before a heavy user's queue, and among equals (no usage yet) users
take turns as in round robin. Ties go to the oldest job (enqueued_at, then job id).

Starvation. A heavy user's waiting jobs do not stay last for ever: their usage decays while
they wait. And a job that has waited `starve_after` or longer goes before every job that has
not (oldest first among them), whatever its owner's usage.

`fifo_order` is the plain alternative: by enqueued_at, then job id.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from services.jobs.queue.model import QueuedJob

_HOUR = timedelta(hours=1)


@dataclass(frozen=True, slots=True)
class Usage:
    """One period of use of `gpus` GPUs by `owner` (a job's run or a reservation)."""

    owner: str
    gpus: int
    start: datetime
    end: datetime


@dataclass(frozen=True, slots=True)
class Policy:
    half_life: timedelta = timedelta(days=7)
    weights: Mapping[str, float] | None = None  # group -> weight
    starve_after: timedelta | None = timedelta(days=1)
    min_window: timedelta = timedelta(hours=1)  # a job's window when it declares none


def decayed_usage(
    periods: Iterable[Usage], now: datetime, half_life: timedelta
) -> dict[str, float]:
    """Each owner's GPU-hours, decayed with `half_life`, up to `now`."""
    rate = math.log(2) / (half_life / _HOUR)  # per hour
    out: dict[str, float] = defaultdict(float)
    for p in periods:
        end = min(p.end, now)
        if end <= p.start or p.gpus <= 0:
            continue
        age_end = (now - end) / _HOUR
        age_start = (now - p.start) / _HOUR
        out[p.owner] += p.gpus * (math.exp(-rate * age_end) - math.exp(-rate * age_start)) / rate
    return dict(out)


def shares(
    users: Iterable[str],
    groups: Mapping[str, Iterable[str]],
    weights: Mapping[str, float] | None,
) -> dict[str, float]:
    """Each user's share (summing to 1): the largest weight of their groups, else 1."""
    raw: dict[str, float] = {}
    for user in users:
        found = [weights[g] for g in groups.get(user, ()) if weights and g in weights]
        raw[user] = max(found) if found else 1.0
    total = sum(raw.values())
    return {user: w / total for user, w in raw.items()} if total > 0 else {}


def job_gpu_hours(job: QueuedJob, min_window: timedelta) -> float:
    """What a job is expected to use: its GPUs times its window, in GPU-hours."""
    gpus = sum(d.gpu_count if d.gpu_count is not None else len(d.gpus) for d in job.demands)
    window = job.max_runtime if job.max_runtime is not None else min_window
    return max(gpus, 1) * (window / _HOUR)


def _by_age(job: QueuedJob) -> tuple[datetime, int]:
    return job.enqueued_at, job.job_id


def fifo_order(queue: Sequence[QueuedJob]) -> list[QueuedJob]:
    return sorted(queue, key=_by_age)


def fair_order(
    queue: Sequence[QueuedJob],
    usage: Mapping[str, float],
    share: Mapping[str, float],
    now: datetime,
    policy: Policy,
) -> list[QueuedJob]:
    """Waiting jobs in fair-share order (see the module's docstring)."""
    starve = policy.starve_after
    starved = sorted(
        (j for j in queue if starve is not None and now - j.enqueued_at >= starve), key=_by_age
    )
    first = {j.job_id for j in starved}
    by_owner: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in fifo_order(queue):
        if job.job_id not in first:
            by_owner[job.owner].append(job)
    charged = {owner: usage.get(owner, 0.0) for owner in by_owner}
    smallest = min((s for s in share.values() if s > 0), default=1.0)

    def key(owner: str) -> tuple[float, datetime, int]:
        s = share.get(owner) or smallest
        head = by_owner[owner][0]
        return charged[owner] / s, head.enqueued_at, head.job_id

    heap = [(key(owner), owner, 0) for owner in by_owner]
    heapq.heapify(heap)
    out = list(starved)
    while heap:
        _, owner, i = heapq.heappop(heap)
        jobs = by_owner[owner]
        job = jobs[i]
        out.append(job)
        charged[owner] += job_gpu_hours(job, policy.min_window)
        if i + 1 < len(jobs):
            by_owner[owner] = jobs[i + 1 :]
            heapq.heappush(heap, (key(owner), owner, 0))
    return out


@dataclass(frozen=True, slots=True)
class Standing:
    """A user's place in the fair share: their decayed usage, share and usage over share."""

    user: str
    usage_gpu_h: float
    share: float

    @property
    def ratio(self) -> float:
        return self.usage_gpu_h / self.share if self.share > 0 else math.inf


def standings(
    queue: Sequence[QueuedJob],
    periods: Iterable[Usage],
    groups: Mapping[str, Iterable[str]],
    now: datetime,
    policy: Policy,
) -> dict[str, Standing]:
    """Every user with queued jobs or usage: decayed usage and share."""
    usage = decayed_usage(periods, now, policy.half_life)
    users = sorted({*usage, *(j.owner for j in queue)})
    share = shares(users, groups, policy.weights)
    return {u: Standing(u, usage.get(u, 0.0), share.get(u, 0.0)) for u in users}


def order(
    queue: Sequence[QueuedJob],
    stand: Mapping[str, Standing],
    now: datetime,
    policy: Policy,
    *,
    fair: bool = True,
) -> list[QueuedJob]:
    """The queue in the policy's order: fair share, or plain FIFO when `fair` is False."""
    if not fair:
        return fifo_order(queue)
    usage = {u: s.usage_gpu_h for u, s in stand.items()}
    share = {u: s.share for u, s in stand.items()}
    return fair_order(queue, usage, share, now, policy)
