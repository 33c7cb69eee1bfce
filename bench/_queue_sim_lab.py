"""The synthetic lab of bench/queue_sim.py and its simulation on a simulated clock.

The lab: 16 users on 8 hosts x 8 GPUs. One heavy user submits bursts of 4-GPU trainings;
4 medium users a few 2-8 GPU trainings a day; 11 light users many short 1-GPU debug jobs and
now and then a small training. Everyone books reservations now and then (1-8 GPUs of a host,
2-8 h, booked 1-24 h ahead). Jobs declare a time limit (over what they need: 1.2-2.5 times)
except a fifth of the trainings, which declare none; their run times vary around each user's
own typical run time for that kind of job.

The simulation runs the real pass (`services.jobs.queue.scheduler.schedule`) at every
arrival, end and booking change and every 5 minutes, in the order the policy gives
(`fairshare.order`: fair share, or FIFO), and applies its decisions as the jobs engine does:
Start (the job runs for its run time), Interrupt (the job stops a minute later and goes back in
the queue, to resume), Kill (it stops now and goes back). The forecast
(`forecast.predict_starts`) is asked every `forecast_every`, with running jobs' ends and
queued jobs' run times learned from each user's finished jobs (`forecast.estimate_runtime`).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from services.jobs.queue import fairshare, forecast
from services.jobs.queue.fairshare import Policy, Usage
from services.jobs.queue.forecast import PastRun, Running
from services.jobs.queue.model import (
    Booking,
    Demand,
    Gpu,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    RunningJob,
    Start,
)
from services.jobs.queue.scheduler import schedule

T0 = datetime(2026, 11, 2, 0, 0, tzinfo=UTC)
H = timedelta(hours=1)
MIN = timedelta(minutes=1)
HOSTS = [f"node{h}" for h in range(8)]
GPUS_PER_HOST = 8
HEAVY = ["heavy"]
MEDIUM = [f"med{i}" for i in range(4)]
LIGHT = [f"light{i:02d}" for i in range(11)]
USERS = HEAVY + MEDIUM + LIGHT
CLASS = {
    **dict.fromkeys(HEAVY, "heavy"),
    **dict.fromkeys(MEDIUM, "medium"),
    **dict.fromkeys(LIGHT, "light"),
}
TICK = timedelta(minutes=5)
INFLOW_WINDOW = timedelta(days=1)  # the recent rate of queued GPU-hours, over this long
GRACE = timedelta(minutes=1)  # an interrupted job ends this long after SIGINT


@dataclass
class SimJob:
    id: int
    owner: str
    name: str
    gpus: int
    limit: timedelta | None
    runtime: timedelta  # what it needs in all
    enqueued_at: datetime
    remaining: timedelta = timedelta(0)
    first_start: datetime | None = None
    started_at: datetime | None = None  # of the current run
    placed: frozenset[str] = frozenset()
    run_no: int = 0
    done_at: datetime | None = None
    interrupted_for: set[int] = field(default_factory=set)
    interruptions: int = 0
    stopping: bool = False
    runs: list[tuple[datetime, datetime, frozenset[str]]] = field(default_factory=list)
    predicted: datetime | None = None  # the first prediction made while it waited
    predicted_at: datetime | None = None


@dataclass
class Workload:
    jobs: list[SimJob]
    bookings: list[tuple[datetime, Booking, tuple[str, ...]]]  # (booked at, booking, GPUs)
    gpus: dict[str, Gpu]


def _lognormal(rng: random.Random, median: timedelta, sigma: float) -> timedelta:
    return median * math.exp(rng.gauss(0, sigma))


def _limit(rng: random.Random, runtime: timedelta, declares: bool) -> timedelta | None:
    if not declares:
        return None
    half_hours = math.ceil(runtime * rng.uniform(1.2, 2.5) / (30 * MIN))
    return half_hours * 30 * MIN


def make_workload(seed: int, days: float) -> Workload:  # noqa: C901 - the lab's whole mix in one place
    rng = random.Random(seed)
    end = T0 + days * 24 * H
    gpus = {
        f"{host}-{i}": Gpu(f"{host}-{i}", host, i, False)
        for host in HOSTS
        for i in range(GPUS_PER_HOST)
    }
    # each user's typical run time per kind of job
    typical = {
        (u, kind): _lognormal(rng, base, 0.3)
        for u in USERS
        for kind, base in (("debug", 20 * MIN), ("train", 4 * H), ("sweep", 5 * H))
    }
    specs: list[tuple[datetime, str, str, int, bool]] = []

    def poisson(per_day: float) -> list[datetime]:
        out, t = [], T0
        while True:
            t += timedelta(days=rng.expovariate(per_day))
            if t >= end:
                return out
            out.append(t)

    for burst in poisson(4.0):  # the heavy user: bursts of 12-20 4-GPU trainings
        for k in range(rng.randint(12, 20)):
            specs.append((burst + k * MIN, "heavy", "sweep", 4, rng.random() < 0.8))
    for u in MEDIUM:
        for t in poisson(2.0):
            specs.append((t, u, "train", rng.choice((2, 4, 8)), rng.random() < 0.8))
    for u in LIGHT:
        for t in poisson(12.0):
            specs.append((t, u, "debug", 1, rng.random() < 0.9))
        for t in poisson(0.7):
            specs.append((t, u, "train", rng.choice((1, 2)), rng.random() < 0.8))
    specs.sort()
    jobs = []
    for i, (at, owner, kind, n, declares) in enumerate(specs, start=1):
        runtime = max(_lognormal(rng, typical[(owner, kind)], 0.25), 2 * MIN)
        limit = _limit(rng, runtime, declares or kind == "debug")
        jobs.append(SimJob(i, owner, kind, n, limit, runtime, at, remaining=runtime))

    taken: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    bookings = []
    for rid, booked_at in enumerate(poisson(5.0), start=1):
        for _ in range(10):
            host = rng.choice(HOSTS)
            size = rng.choice((1, 2, 4, 8))
            first = rng.randrange(0, GPUS_PER_HOST - size + 1)
            chosen = tuple(f"{host}-{i}" for i in range(first, first + size))
            start = booked_at + timedelta(minutes=rng.randrange(60, 24 * 60))
            stop = start + timedelta(minutes=rng.randrange(120, 8 * 60))
            if not any(s < stop and start < e for g in chosen for s, e in taken[g]):
                break
        else:
            continue
        for g in chosen:
            taken[g].append((start, stop))
        owner = rng.choice(USERS[1:])
        bookings.append((booked_at, Booking(rid, owner, frozenset(), start, stop), chosen))
    return Workload(jobs, bookings, gpus)


# --- the simulation ------------------------------------------------------------------------------


class Simulation:
    def __init__(
        self,
        work: Workload,
        *,
        fair: bool,
        days: float,
        forecast_every: timedelta | None,
        horizon: timedelta = timedelta(days=7),
    ) -> None:
        self.fair = fair
        self.end = T0 + days * 24 * H
        self.jobs = {j.id: _fresh(j) for j in work.jobs}
        self.gpus = work.gpus
        self.pending_bookings = sorted(work.bookings, key=lambda b: b[0])
        self.bookings: dict[str, list[Booking]] = defaultdict(list)
        self.booked: list[tuple[Booking, int]] = []  # (booking, GPUs) known so far
        self.gpus_of_booking = {b.reservation_id: chosen for _, b, chosen in work.bookings}
        self.policy = Policy(half_life=7 * 24 * H, starve_after=72 * H, min_window=H)
        self.forecast_every = forecast_every
        self.horizon = horizon
        self.queue: dict[int, SimJob] = {}
        self.running: dict[int, SimJob] = {}
        self.history: list[PastRun] = []
        self.events: list[tuple[datetime, int, str, int, int]] = []
        self._seq = 0
        self.passes = 0
        self.forecasts = 0
        self.standing: dict[str, fairshare.Standing] = {}

    def _push(self, at: datetime, kind: str, ref: int = 0, run_no: int = 0) -> None:
        self._seq += 1
        heapq.heappush(self.events, (at, self._seq, kind, ref, run_no))

    def run(self) -> None:
        for job in self.jobs.values():
            self._push(job.enqueued_at, "arrive", job.id)
        for i, (at, _, _) in enumerate(self.pending_bookings):
            self._push(at, "book", i)
        t = T0
        while t < self.end:
            self._push(t, "tick")
            t += TICK
        next_forecast = T0
        while self.events:
            now = self.events[0][0]
            if now >= self.end:
                break
            while self.events and self.events[0][0] == now:
                _, _, kind, ref, run_no = heapq.heappop(self.events)
                self._apply(now, kind, ref, run_no)
            self._pass(now)
            if self.forecast_every is not None and now >= next_forecast and self.queue:
                self._forecast(now)
                next_forecast = now + self.forecast_every

    def _apply(self, now: datetime, kind: str, ref: int, run_no: int) -> None:
        if kind == "arrive":
            self.queue[ref] = self.jobs[ref]
        elif kind == "book":
            _, booking, chosen = self.pending_bookings[ref]
            for g in chosen:
                self.bookings[g].append(booking)
                self.bookings[g].sort(key=lambda b: b.start)
            self.booked.append((booking, len(chosen)))
        elif kind == "end":
            job = self.jobs[ref]
            if job.run_no == run_no and ref in self.running:
                self._stop(job, now)

    def _stop(self, job: SimJob, now: datetime) -> None:
        del self.running[job.id]
        assert job.started_at is not None
        job.runs.append((job.started_at, now, job.placed))
        job.remaining -= now - job.started_at
        job.run_no += 1
        job.placed = frozenset()
        if job.remaining <= timedelta(0):
            job.done_at = now
            ran = _ran(job)
            self.history.append(PastRun(job.owner, job.name, job.gpus, ran))
        else:
            job.stopping = False
            self.queue[job.id] = job  # back in the queue, to resume (enqueued_at kept)

    def state(self, now: datetime) -> QueueState:
        busy = {g for j in self.running.values() for g in j.placed}
        gpus = {u: Gpu(u, g.host, g.index, u in busy) for u, g in self.gpus.items()}
        queue = [_queued(j) for j in self.queue.values()]
        running = [
            RunningJob(j.id, j.owner, j.placed, True, frozenset(j.interrupted_for))
            for j in self.running.values()
            if not j.stopping
        ]
        return QueueState(
            now=now,
            gpus=gpus,
            bookings=self.bookings,
            queue=queue,
            running=running,
            min_window=H,
            preempt_lead=5 * MIN,
            hold_after=H,
            order=self._order(queue, now),
        )

    def _ahead(self, now: datetime) -> dict[int, float]:
        stand = self.standing
        ratio = {u: s.ratio for u, s in stand.items()}
        inflow = _inflow(self.jobs.values(), self.history, now) if self.fair else {}
        booked = sum(
            n * ((b.end - b.start) / H)
            for (at, b, _), n in zip(
                self.pending_bookings, (len(c) for *_, c in self.pending_bookings), strict=True
            )
            if now - INFLOW_WINDOW <= at <= now
        ) / (INFLOW_WINDOW / H)
        owners = {j.id: j.owner for j in self.queue.values()}
        return forecast.arrivals_ahead(owners, ratio, inflow, len(self.gpus), booked)

    def _order(self, queue: list[QueuedJob], now: datetime) -> list[int]:
        periods = [
            Usage(b.owner, n, b.start, min(b.end, now)) for b, n in self.booked if b.start < now
        ]
        for j in self.jobs.values():
            periods.extend(Usage(j.owner, j.gpus, s, e) for s, e, _ in j.runs)
        periods.extend(
            Usage(j.owner, j.gpus, j.started_at, now)
            for j in self.running.values()
            if j.started_at is not None
        )
        stand = self.standing = fairshare.standings(queue, periods, {}, now, self.policy)
        return [j.job_id for j in fairshare.order(queue, stand, now, self.policy, fair=self.fair)]

    def _pass(self, now: datetime) -> None:
        self.passes += 1
        for d in schedule(self.state(now)):
            job = self.jobs[d.job_id]
            if isinstance(d, Start):
                self._start(job, d, now)
            elif isinstance(d, Interrupt | Kill) and not job.stopping:
                job.interrupted_for.add(d.reservation_id)
                job.interruptions += 1
                job.stopping = True
                at = now + GRACE if isinstance(d, Interrupt) else now
                self._push(at, "end", job.id, job.run_no)  # then it resumes from the queue

    def _start(self, job: SimJob, d: Start, now: datetime) -> None:
        del self.queue[job.id]
        job.placed = frozenset(g for _, on in d.placement.values() for g in on)
        job.started_at = now
        job.first_start = job.first_start or now
        self.running[job.id] = job
        self._push(now + job.remaining, "end", job.id, job.run_no)

    def _forecast(self, now: datetime) -> None:
        self.forecasts += 1
        state = self.state(now)
        running = []
        for j in self.running.values():
            assert j.started_at is not None
            expected = _expected(j, self.history)
            end = j.started_at + max(expected - _ran(j), MIN)
            running.append(Running(j.id, j.placed, end if end > now else now + 10 * MIN))
        durations = {
            j.id: max(_expected(j, self.history) - _ran(j), MIN) for j in self.queue.values()
        }
        got = forecast.predict_starts(state, running, durations, now + self.horizon)
        got = forecast.stretched(got, now, self._ahead(now), now + self.horizon)
        for job_id, at in got.items():
            job = self.jobs[job_id]
            if job.predicted_at is None and at is not None and job.first_start is None:
                job.predicted, job.predicted_at = at, now


def _inflow(jobs: Iterable[SimJob], history: list[PastRun], now: datetime) -> dict[str, float]:
    """Each user's GPU-hours queued over the last day, per hour (expected run times)."""
    out: dict[str, float] = defaultdict(float)
    for j in jobs:
        if now - INFLOW_WINDOW <= j.enqueued_at <= now:
            out[j.owner] += j.gpus * (_expected(j, history) / H) / (INFLOW_WINDOW / H)
    return dict(out)


def _ran(job: SimJob) -> timedelta:
    return sum((e - s for s, e, _ in job.runs), timedelta(0))


def _expected(job: SimJob, history: list[PastRun]) -> timedelta:
    guess = forecast.estimate_runtime(history, job.owner, job.name, job.gpus, job.limit)
    return guess if guess is not None else H


def _queued(job: SimJob) -> QueuedJob:
    return QueuedJob(
        job.id, job.owner, job.enqueued_at, (Demand(0, None, gpu_count=job.gpus),), job.limit
    )


def _fresh(job: SimJob) -> SimJob:
    return SimJob(
        job.id,
        job.owner,
        job.name,
        job.gpus,
        job.limit,
        job.runtime,
        job.enqueued_at,
        remaining=job.runtime,
    )
