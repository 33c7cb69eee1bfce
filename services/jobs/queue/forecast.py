"""Predicted starts of queued jobs (pure): the queue pass replayed over the future.

`predict_starts` runs the real pass (`scheduler.schedule`) at `now`, then again at each moment
something frees GPUs: a running job's expected end, a booking's end, the expected end of a
job the replay started. The first pass that starts a job gives its predicted start; a job
still waiting at `horizon` (or when nothing more happens) has none. What the replay assumes:

- a running job ends at its expected end (`Running.end`): its time limit, or a learned
  estimate (`estimate_runtime`), else the queue's window;
- a queued job, once started, runs for its expected duration (`durations`, else its window);
- GPUs busy with processes Warden did not start stay busy;
- the bookings (the calendar) stay as they are; nobody queues more jobs;
- the order is the one given (`QueueState.order`), as it is now.

Jobs still to come: under fair share, users with less usage for their share go before a
waiting job when they queue more, and reservations booked later take GPUs too.
`arrivals_ahead` estimates the share of the GPUs these will take (each user's recent rate of
GPU-hours queued, the recent rate of GPU-hours booked), and `stretched` lengthens each
predicted wait by 1 / (1 - that share), as the wait of a low class in a priority queue is.

`estimate_runtime` learns how long a job runs from the same user's earlier runs: the median of
their last runs of a job of the same name, else of jobs on as many GPUs, capped by its limit.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from services.jobs.queue.model import Gpu, QueueState, Start
from services.jobs.queue.scheduler import schedule

# At most this share of the GPUs is expected to go to jobs still to come (`arrivals_ahead`).
MAX_AHEAD = 0.8


@dataclass(frozen=True, slots=True)
class Running:
    """A running job's GPUs and when it is expected to end."""

    job_id: int
    gpus: frozenset[str]
    end: datetime


@dataclass(frozen=True, slots=True)
class PastRun:
    """A finished run, for learning how long a user's jobs take."""

    owner: str
    name: str
    gpus: int
    duration: timedelta


def estimate_runtime(
    history: Sequence[PastRun],
    owner: str,
    name: str,
    gpus: int,
    limit: timedelta | None,
    *,
    last: int = 10,
) -> timedelta | None:
    """Median of the owner's last `last` runs of the same name (else on as many GPUs), at most
    `limit`; `limit` when there are none (None when neither)."""
    same = [r.duration for r in history if r.owner == owner and r.name == name]
    if not same:
        same = [r.duration for r in history if r.owner == owner and r.gpus == gpus]
    if not same:
        return limit
    recent = sorted(same[-last:])
    half = len(recent) // 2
    guess = recent[half] if len(recent) % 2 else (recent[half - 1] + recent[half]) / 2
    return min(guess, limit) if limit is not None else guess


def predict_starts(
    state: QueueState,
    running: Sequence[Running],
    durations: Mapping[int, timedelta],
    horizon: datetime,
    *,
    max_passes: int = 400,
) -> dict[int, datetime | None]:
    """Each queued job's predicted start (None: not before `horizon`)."""
    starts: dict[int, datetime | None] = {job.job_id: None for job in state.queue}
    ends = {r.job_id: r for r in running}
    job_gpus = {g for r in running for g in r.gpus}
    # GPUs busy now for a reason the replay cannot see end (processes outside Warden).
    stuck = {uuid for uuid, g in state.gpus.items() if g.busy and uuid not in job_gpus}
    booking_ends = sorted(
        {b.end for bs in state.bookings.values() for b in bs if state.now < b.end < horizon}
    )
    waiting = list(state.queue)
    now = state.now
    windows = {j.job_id: j.max_runtime or state.min_window for j in state.queue}
    for _ in range(max_passes):
        if not waiting or now >= horizon:
            break
        busy = stuck | {g for r in ends.values() if r.end > now for g in r.gpus}
        gpus = {u: Gpu(g.uuid, g.host, g.index, u in busy) for u, g in state.gpus.items()}
        step = replace(state, now=now, gpus=gpus, queue=waiting, running=())
        started = {d.job_id: d for d in schedule(step) if isinstance(d, Start)}
        for job_id, start in started.items():
            starts[job_id] = now
            used = frozenset(g for _, on in start.placement.values() for g in on)
            run_for = durations.get(job_id, windows[job_id])
            ends[job_id] = Running(job_id, used, now + max(run_for, timedelta(seconds=1)))
        waiting = [j for j in waiting if j.job_id not in started]
        later = [r.end for r in ends.values() if r.end > now]
        i = bisect.bisect_right(booking_ends, now)
        if i < len(booking_ends):
            later.append(booking_ends[i])
        if not later:
            break
        now = min(later)
    return {
        job_id: (at if at is not None and at < horizon else None) for job_id, at in starts.items()
    }


def arrivals_ahead(
    owners: Mapping[int, str],
    ratio: Mapping[str, float],
    inflow: Mapping[str, float],
    capacity: int,
    booked: float = 0.0,
) -> dict[int, float]:
    """For each queued job (`owners`: job id -> owner), the share of the GPUs that jobs still
    to come are expected to take ahead of it: those of users whose usage over their share
    (`ratio`) is lower than its owner's, at each one's recent rate (`inflow`: GPU-hours per
    hour), and reservations still to be booked (`booked`: the recent rate of GPU-hours booked
    per hour, ahead of everyone). Under FIFO only `booked`: jobs still to come go behind."""
    if capacity <= 0:
        return {}
    out = {}
    for job_id, owner in owners.items():
        mine = ratio.get(owner, 0.0)
        ahead = booked + sum(
            rate for u, rate in inflow.items() if u != owner and ratio.get(u, 0.0) < mine
        )
        out[job_id] = min(ahead / capacity, MAX_AHEAD)
    return out


def stretched(
    starts: Mapping[int, datetime | None],
    now: datetime,
    ahead: Mapping[int, float],
    horizon: datetime,
) -> dict[int, datetime | None]:
    """Predicted starts with the wait stretched by 1 / (1 - ahead): while a job waits, jobs to
    come that go before it take that share of the GPUs (as in a priority queue)."""
    out: dict[int, datetime | None] = {}
    for job_id, at in starts.items():
        rho = ahead.get(job_id, 0.0)
        if at is None or rho <= 0:
            out[job_id] = at
            continue
        later = now + (at - now) / (1 - rho)
        out[job_id] = later if later < horizon else None
    return out
