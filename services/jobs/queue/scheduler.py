"""The queue scheduler of the jobs service (pure): which queued jobs start now and on which
GPUs, and which running queued jobs must make way for a reservation.

One call of `schedule` is one pass over a snapshot (`QueueState`); it does no I/O and keeps no
state between passes (what was signalled already comes back in `RunningJob.interrupted_for`).
This module holds the order and the pass; the snapshot and the decisions are
`services.jobs.queue.model`, where a job's tasks fit is `services.jobs.queue.placement`.

Starting. A queued job needs, for its window [now, now + (max_runtime or min_window)), GPUs
that are:

- known (in `QueueState.gpus`) and not in `avoid[job]` (the owner was refused access there);
- free now: not `busy` (processes seen by the monitor or a running Warden job; GPUs of
  `QueueState.running` count as busy too), and not given to a job earlier in the same pass;
- not reserved by anyone else for any part of the window: a booking overlapping the window is
  fine only where the job's owner is its owner or one of its guests.

A task names its GPUs (uuids, whose host is fixed) or asks for "any N GPUs on one host" (on
the given host, or on any host when `host` is None); a task with no GPUs and a host needs
nothing. Any-N tasks are placed best-fit: on the host where the job could use the fewest GPUs
that still fit, then by host name; on that host the lowest GPU indexes. A job's tasks start
together or not at all: named tasks first, then any-N tasks largest first, each on what the
ones before left (a greedy choice: a job of several any-N tasks may wait although another
split across hosts would fit, see "Limits").

Order: `QueueState.order` when given (the jobs engine gives fair share or FIFO,
`services.jobs.queue.fairshare`), else FIFO with per-user fairness (`queue_order`): a job's
rank is its position among its owner's queued jobs (by enqueued_at, then job_id); jobs go by
(rank, enqueued_at, job_id), so users take turns. A job that cannot start does not block
later ones (backfill): with the defaults a waiting job keeps nothing, not even GPUs that are
free now.

Anti-starvation (opt-in, `QueueState.hold_after`): backfill alone lets a stream of small jobs
starve a big one (its GPUs never come free together). With `hold_after` set, the first job in
queue order that has waited at least that long and is blocked *only* because GPUs are busy
(it would start if every busy GPU were free: nothing reserved, unknown or refused stands in its
way) holds the GPUs of such a placement that are free now: later jobs in the pass may not take
them. Its placement prefers the host where most of them are free already, so from pass to
pass it keeps the same GPUs and starts once the busy ones come free. One job holds at a time;
jobs earlier in the queue order may still take what it holds. With `hold_after` None (the
default) there is no hold and starvation of large jobs is possible (a documented limit).

Preemption: a running job that came from the queue (`preemptible`) gets a `Kill` when a
reservation of someone else (not its owner, the job's owner not a guest) on one of its GPUs
covers now, else an `Interrupt` (its hand-back signal, once per reservation: `interrupted_for`)
when such a reservation starts within its lead (now < start <= now + lead; the lead is the
job's own `RunningJob.lead`, its hand-back grace, else `preempt_lead`). One decision per job and
pass, Kill before Interrupt, the earliest reservation first.

Assumptions: each GPU's bookings are sorted by start and do not overlap (so they are sorted by
end too), as the reservations service keeps them; all datetimes are comparable (all aware).

Limits: greedy placement of multi-task any-N jobs (no search over splits); a GPU's bookings
are looked at up to the longest window in the queue; best fit counts the GPUs this job could
use on a host, not other jobs' needs.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime
from operator import attrgetter, itemgetter

from services.jobs.queue.model import (
    Booking,
    Decision,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    Start,
    Waiting,
)
from services.jobs.queue.placement import Placer, Refused

_END = attrgetter("end")


# --- order -----------------------------------------------------------------------------------


def queue_order(queue: Sequence[QueuedJob]) -> list[QueuedJob]:
    """Round robin among users, FIFO within a user: by (rank among the owner's jobs,
    enqueued_at, job_id)."""
    by_owner: dict[str, list[QueuedJob]] = defaultdict(list)
    for job in queue:
        by_owner[job.owner].append(job)
    keyed: list[tuple[tuple[int, datetime, int], QueuedJob]] = []
    for jobs in by_owner.values():
        jobs.sort(key=lambda j: (j.enqueued_at, j.job_id))
        keyed.extend(((rank, j.enqueued_at, j.job_id), j) for rank, j in enumerate(jobs))
    keyed.sort(key=itemgetter(0))
    return [job for _, job in keyed]


def ordered(state: QueueState) -> list[QueuedJob]:
    """The queue in `state.order` when given (others after it, round robin), else
    `queue_order`."""
    if state.order is None:
        return queue_order(state.queue)
    by_id = {job.job_id: job for job in state.queue}
    out = [by_id.pop(i) for i in state.order if i in by_id]
    return out + queue_order(list(by_id.values()))


# --- the pass --------------------------------------------------------------------------------


def schedule(state: QueueState) -> list[Decision]:
    """One pass: Interrupt/Kill decisions first (in `running` order), then one Start or
    Waiting per queued job, in queue order."""
    decisions: list[Decision] = list(_preemptions(state))
    if state.queue:
        decisions.extend(_starts(state))
    return decisions


def _preemptions(state: QueueState) -> list[Interrupt | Kill]:  # noqa: C901 - the preemption rule: interrupt, then kill, per running job
    now = state.now
    out: list[Interrupt | Kill] = []
    for job in state.running:
        if not job.preemptible:
            continue
        lead_end = now + (job.lead if job.lead is not None else state.preempt_lead)
        kill: Booking | None = None
        interrupt: Booking | None = None
        for uuid in job.gpus:
            bookings = state.bookings.get(uuid)
            if not bookings:
                continue
            for i in range(bisect.bisect_right(bookings, now, key=_END), len(bookings)):
                b = bookings[i]
                if b.start > lead_end:
                    break
                if b.owner == job.owner or job.owner in b.guests:
                    continue
                if b.start <= now:
                    if kill is None or (b.start, b.reservation_id) < (
                        kill.start,
                        kill.reservation_id,
                    ):
                        kill = b
                elif b.reservation_id not in job.interrupted_for and (
                    interrupt is None
                    or (b.start, b.reservation_id) < (interrupt.start, interrupt.reservation_id)
                ):
                    interrupt = b
        if kill is not None:
            out.append(Kill(job.job_id, kill.reservation_id))
        elif interrupt is not None:
            out.append(Interrupt(job.job_id, interrupt.reservation_id, interrupt.start))
    return out


def _starts(state: QueueState) -> list[Decision]:
    """One Start or Waiting per queued job, in queue order; the anti-starvation hold."""
    placer = Placer(state)
    out: list[Decision] = []
    hold_after = state.hold_after
    holder: int | None = None
    for job in ordered(state):
        w = placer.windows[job.job_id]
        avoid = state.avoid.get(job.job_id, frozenset())
        placer.probe_busy = (
            hold_after is not None and holder is None and state.now - job.enqueued_at >= hold_after
        )
        try:
            placement = placer.place(job, w, avoid)
        except Refused as refused:
            reason = refused.reason
            if placer.probe_busy and refused.busy_only:
                held = placer.hold(job, w, avoid)
                if held is not None:
                    holder = job.job_id
                    reason += f" (waiting longest: {held} free GPUs kept for it)"
            out.append(Waiting(job.job_id, reason))
            continue
        out.append(Start(job.job_id, placement))
    return out
