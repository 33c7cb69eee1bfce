"""The queue's order and predicted starts as the jobs engine keeps them ([queue]): usage from
the jobs in memory and the reservations seen, each user's share, the order the scheduler
follows (`queue/fairshare.py`), each waiting job's reason and predicted start
(`queue/forecast.py`), and the answer of `jobs.get_queue` (and of the `queue.changed` event).

No I/O here: the engine calls it under the working state's lock and publishes what changed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from services.accounts import api as accounts_api
from services.jobs.queue import fairshare, forecast
from services.jobs.queue.fairshare import Policy, Standing, Usage
from services.jobs.queue.forecast import PastRun, Running
from services.jobs.queue.model import QueuedJob, QueueState
from services.jobs.state import JobState
from services.shared.config.queue import QueueSettings
from services.shared.errors import WardenError
from services.shared.reservation_book import Holding

if TYPE_CHECKING:
    from services.jobs.working_state import WorkingState
    from services.shared.bus import Bus

log = logging.getLogger("warden.jobs")
Compute = Callable[[], dict[int, datetime | None]]

# A running job past its expected end is expected to end this much later (it is overdue).
OVERDUE_SLACK = timedelta(minutes=10)
# The forecast is computed again when what it read changed, or after this long.
FORECAST_EVERY = timedelta(seconds=30)
FORECAST_GAP = timedelta(seconds=5)  # and not sooner than this after the last
# Nor sooner than this many times the last one took: on a large fleet a forecast takes
# seconds of CPU, and it shares the process with the queue (at most a fifth of a core).
FORECAST_COST_RATIO = 5
# Who is in which group (for the group weights) is asked again after this long.
GROUPS_EVERY = timedelta(minutes=5)
# Predicted starts allow for jobs and reservations still to come at the rates of this long.
INFLOW_WINDOW = timedelta(days=1)
_ENDED = frozenset({"succeeded", "failed", "stopped"})


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _gpus(state: JobState) -> int:
    return sum(t.gpu_count if t.gpu_count is not None else len(t.gpus) for t in state.job.tasks)


class FairQueue:
    def __init__(self, settings: QueueSettings, min_window: timedelta) -> None:
        self.settings = settings
        self.fair = settings.policy == "fair"
        self.policy = Policy(
            half_life=timedelta(hours=settings.half_life_h),
            weights={w.group: w.weight for w in settings.weights} or None,
            starve_after=timedelta(hours=settings.starve_after_h)
            if settings.starve_after_h
            else None,
            min_window=min_window,
        )
        self.groups: dict[str, tuple[str, ...]] = {}  # user -> groups (when weights are set)
        self.groups_at: datetime | None = None
        self.reserved: dict[int, Usage] = {}  # reservations used so far, by id
        self.standing: dict[str, Standing] = {}
        self.order_ids: list[int] = []
        self.predicted: dict[int, datetime | None] = {}
        self.reasons: dict[int, str] = {}
        self._seen: tuple[Any, ...] | None = None
        self.computing = False  # a forecast is being computed off the lock
        self.cost = timedelta(0)  # how long the last forecast took to compute
        self.task: asyncio.Task[None] | None = None
        self._forecast_at: datetime | None = None
        self._published: tuple[Any, ...] | None = None

    # --- usage ----------------------------------------------------------------------------

    def note_reservations(self, held: Iterable[Holding], now: datetime) -> None:
        """Keep the part of each reservation used so far (ended ones leave the book)."""
        for h in held:
            if h.start < now:
                self.reserved[h.reservation_id] = Usage(
                    h.owner, len(h.gpus), h.start, min(h.end, now)
                )
        forgotten = now - 10 * self.policy.half_life
        for rid in [r for r, u in self.reserved.items() if u.end < forgotten]:
            del self.reserved[rid]

    def periods(self, jobs: Iterable[JobState], now: datetime) -> list[Usage]:
        """Jobs' runs (not those inside a reservation: it counts already) and reservations."""
        out = list(self.reserved.values())
        for s in jobs:
            if s.reservation_id is not None:
                continue
            for run in s.tasks:
                if run.started_at is not None and run.gpus:
                    end = run.ended_at or now
                    out.append(Usage(s.owner, len(run.gpus), run.started_at, end))
        return out

    # --- the order ------------------------------------------------------------------------

    def order(
        self, queue: Sequence[QueuedJob], jobs: Iterable[JobState], now: datetime
    ) -> list[int]:
        """The order the pass follows (and the standings shown)."""
        self.standing = fairshare.standings(
            queue, self.periods(jobs, now), self.groups, now, self.policy
        )
        ordered = fairshare.order(queue, self.standing, now, self.policy, fair=self.fair)
        self.order_ids = [j.job_id for j in ordered]
        return self.order_ids

    # --- predicted starts -----------------------------------------------------------------

    def forecast(
        self, state: QueueState, jobs: Mapping[int, JobState], end_of: Mapping[int, datetime]
    ) -> tuple[bool, Compute | None]:
        """After a pass: the reasons, whether what users see changed, and the forecast to
        compute off the lock when one is due (`apply` takes its answer). `end_of`: reservation
        id -> its end (jobs inside one end with it)."""
        now = state.now
        self.reasons = self._reasons(jobs)
        busy = frozenset(u for u, g in state.gpus.items() if g.busy)
        booked = sum(len(b) for b in state.bookings.values())
        seen = (tuple(self.order_ids), busy, booked, tuple(sorted(end_of.items())))
        last = self._forecast_at
        paced = FORECAST_COST_RATIO * self.cost
        due = last is None or (
            now - last >= max(paced, FORECAST_GAP)
            and (now - last >= FORECAST_EVERY or seen != self._seen)
        )
        compute: Compute | None = None
        if due and not self.computing:
            self._seen, self._forecast_at, self.computing = seen, now, True
            history = past_runs(jobs.values())
            running = running_ends(jobs.values(), history, end_of, now, self.policy.min_window)
            durations = {
                j.job_id: expected_runtime(jobs[j.job_id], history, self.policy.min_window)
                for j in state.queue
                if j.job_id in jobs
            }
            horizon = now + timedelta(hours=self.settings.forecast_horizon_h)
            ahead = self._ahead(state, jobs.values(), history)

            def compute() -> dict[int, datetime | None]:
                starts = forecast.predict_starts(state, running, durations, horizon)
                return forecast.stretched(starts, now, ahead, horizon)

        return self._changed(), compute

    def apply(self, predicted: Mapping[int, datetime | None], jobs: Mapping[int, JobState]) -> bool:
        """Under the lock: a computed forecast; True when what users see changed."""
        self.computing = False
        self.predicted = dict(predicted)
        for job_id, at in predicted.items():
            if job_id in jobs:
                jobs[job_id].predicted_start = at
        return self._changed()

    def _changed(self) -> bool:
        shown = tuple((i, self.predicted.get(i), self.reasons.get(i)) for i in self.order_ids)
        if shown == self._published:
            return False
        self._published = shown
        return True

    def _ahead(
        self, state: QueueState, jobs: Iterable[JobState], history: Sequence[PastRun]
    ) -> dict[int, float]:
        """The share of the GPUs jobs and reservations still to come are expected to take
        ahead of each queued job, from the rates of the last INFLOW_WINDOW."""
        now, window_h = state.now, INFLOW_WINDOW / timedelta(hours=1)
        since = now - INFLOW_WINDOW
        inflow: dict[str, float] = defaultdict(float)
        if self.fair:
            for s in jobs:
                if s.enqueued_at is not None and since <= s.enqueued_at <= now:
                    hours = expected_runtime(s, history, self.policy.min_window) / timedelta(
                        hours=1
                    )
                    inflow[s.owner] += _gpus(s) * hours / window_h
        booked = (
            sum(
                u.gpus * ((u.end - u.start) / timedelta(hours=1))
                for u in self.reserved.values()
                if since <= u.start <= now
            )
            / window_h
        )
        ratio = {user: s.ratio for user, s in self.standing.items()}
        owners = {j.job_id: j.owner for j in state.queue}
        return forecast.arrivals_ahead(owners, ratio, inflow, len(state.gpus), booked)

    def _reasons(self, jobs: Mapping[int, JobState]) -> dict[int, str]:
        """The pass's reason of each job, and how many jobs of users with less usage for their
        share go before it (one count per user seen so far: no quadratic walk)."""
        out: dict[int, str] = {}
        before: dict[str, int] = defaultdict(int)  # owner -> their jobs so far in the order
        ratio = {user: s.ratio for user, s in self.standing.items()}
        for job_id in self.order_ids:
            state = jobs.get(job_id)
            if state is None:
                continue
            reason = state.waiting_reason or "waiting for the next pass"
            mine = ratio.get(state.owner)
            if self.fair and mine is not None:
                ahead = sum(
                    n
                    for owner, n in before.items()
                    if owner != state.owner and ratio.get(owner, mine) < mine
                )
                if ahead:
                    reason += f"; behind {ahead} jobs of users with less usage for their share"
            before[state.owner] += 1
            out[job_id] = reason
        return out

    # --- the answer -----------------------------------------------------------------------

    def answer(self, jobs: Mapping[int, JobState], now: datetime) -> dict[str, Any]:
        """What `jobs.get_queue` answers and `queue.changed` carries."""
        listed = []
        for position, job_id in enumerate(self.order_ids, start=1):
            state = jobs.get(job_id)
            if state is None or not (state.queued and state.status == "queued"):
                continue
            listed.append(
                {
                    "id": job_id,
                    "owner": state.owner,
                    "name": state.job.name,
                    "position": position,
                    "gpus": _gpus(state),
                    "enqueued_at": _iso(state.enqueued_at or state.created_at),
                    "max_runtime_s": state.max_runtime_s,
                    "reason": self.reasons.get(job_id) or state.waiting_reason,
                    "predicted_start": _iso(self.predicted.get(job_id)),
                }
            )
        users = [
            {
                "user": s.user,
                "share": round(s.share, 6),
                "usage_gpu_h": round(s.usage_gpu_h, 3),
                "queued": sum(1 for j in listed if j["owner"] == s.user),
                "running": sum(1 for j in jobs.values() if j.owner == s.user and j.active),
            }
            for s in sorted(self.standing.values(), key=lambda s: (s.ratio, s.user))
        ]
        return {
            "policy": self.settings.policy,
            "half_life_h": self.settings.half_life_h,
            "horizon_h": self.settings.forecast_horizon_h,
            "at": now.isoformat(),
            "jobs": listed,
            "users": users,
        }


# --- what the forecast reads from the jobs ---------------------------------------------------


def past_runs(jobs: Iterable[JobState]) -> list[PastRun]:
    """Finished jobs (every task started and ended), oldest end first."""
    found: list[tuple[datetime, PastRun]] = []
    for s in jobs:
        if s.status not in _ENDED or not s.tasks:
            continue
        starts = [r.started_at for r in s.tasks if r.started_at is not None]
        ends = [r.ended_at for r in s.tasks if r.ended_at is not None]
        if len(starts) == len(ends) == len(s.tasks):
            found.append(
                (max(ends), PastRun(s.owner, s.job.name, _gpus(s), max(ends) - min(starts)))
            )
    found.sort(key=lambda pair: pair[0])
    return [run for _, run in found]


def expected_runtime(state: JobState, history: Sequence[PastRun], default: timedelta) -> timedelta:
    limit = None if state.max_runtime_s is None else timedelta(seconds=state.max_runtime_s)
    guess = forecast.estimate_runtime(history, state.owner, state.job.name, _gpus(state), limit)
    return guess if guess is not None else default


def running_ends(
    jobs: Iterable[JobState],
    history: Sequence[PastRun],
    end_of: Mapping[int, datetime],
    now: datetime,
    default: timedelta,
) -> list[Running]:
    """Each running job's GPUs and expected end: its stop time or reservation's end, its time
    limit or learned run time; an overdue job a little later than now."""
    out = []
    for s in jobs:
        if not s.active:
            continue
        gpus = frozenset(g for run in s.tasks if run.active for g in run.gpus)
        started = min((r.started_at for r in s.tasks if r.started_at is not None), default=now)
        ends = [started + expected_runtime(s, history, default)]
        if s.stop_at is not None:
            ends.append(s.stop_at)
        if s.reservation_id is not None and s.reservation_id in end_of:
            ends.append(end_of[s.reservation_id])
        end = min(ends)
        out.append(Running(s.id, gpus, end if end > now else now + OVERDUE_SLACK))
    return out


# --- the engine's calls ------------------------------------------------------------------------


def forecast_queue(working: WorkingState, state: QueueState) -> tuple[bool, Compute | None]:
    """Under the lock, after a pass: reasons now, the forecast to compute when due."""
    end_of = {}
    for s in working.jobs.values():
        if s.active and s.reservation_id is not None:
            held = working.book.get(s.reservation_id)
            if held is not None:
                end_of[s.reservation_id] = held.end
    return working.fair.forecast(state, working.jobs, end_of)


async def publish_queue(bus: Bus, working: WorkingState, changed: bool) -> None:
    """The `queue.changed` event when `changed`: the queue as `jobs.get_queue` answers it."""
    if not changed:
        return
    async with working.lock:
        data = working.fair.answer(working.jobs, working.clock())
    await bus.emit("queue.changed", data, source="jobs")


async def refresh_groups(bus: Bus, working: WorkingState) -> None:
    """Who is in which group, asked of the accounts every GROUPS_EVERY while [queue] weights
    are set (as a queued job's owner: any user may list the groups); kept when it fails."""
    fair = working.fair
    now = working.clock()
    if not fair.policy.weights or (
        fair.groups_at is not None and now - fair.groups_at < GROUPS_EVERY
    ):
        return
    asker = next((s.owner for s in working.jobs.values() if s.queued), None)
    if asker is None:
        return
    fair.groups_at = now
    try:
        found = await accounts_api.LIST_GROUPS.call(bus, {"actor": asker})
    except WardenError as err:
        log.warning("fair share: groups not read (%s); the last ones are used", err.message)
        return
    groups: dict[str, list[str]] = defaultdict(list)
    for group in found:
        for member in group["members"]:
            groups[member].append(group["name"])
    fair.groups = {user: tuple(names) for user, names in groups.items()}


def start_forecast(bus: Bus, working: WorkingState, compute: Compute | None) -> None:
    """Compute a forecast in a worker thread (a replay of many passes may take seconds on a
    large fleet: never under the lock), then apply it and publish what changed."""
    if compute is None:
        return

    async def run() -> None:
        fair = working.fair
        began = time.monotonic()
        try:
            predicted = await asyncio.to_thread(compute)
        except Exception:
            log.exception("the queue's forecast failed; the last one is kept")
            fair.computing = False
            return
        fair.cost = timedelta(seconds=time.monotonic() - began)
        async with working.lock:
            changed = fair.apply(predicted, working.jobs)
        await publish_queue(bus, working, changed)

    working.fair.task = asyncio.create_task(run(), name="queue forecast")
