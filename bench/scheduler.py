"""How long one pass of the jobs queue scheduler (`services.jobs.queue.scheduler.schedule`) takes.

Usage::

    .venv/bin/python bench/scheduler.py [--quick] [--passes N] [--seed N] [--profile]

Set-up (seeded, built once; the function is pure, so every pass sees the same state):

- 1,000 GPUs on 125 hosts (8 each, node000..node124), ~30 % busy.
- 5,000 reservations by random owners among 50 users (user00..user49; 10 % with 1-3 guests),
  each on 1-8 GPUs of one host (1: 50 %, 2: 25 %, 4: 15 %, 8: 10 %), starting between 1 day
  ago and 14 days ahead, lasting 1-48 h (log-uniform), never overlapping on a GPU (a draw that
  overlaps is drawn again).
- ~100 running preemptible jobs on busy GPUs (1-8 of one host), 20 % of them already
  interrupted for a reservation.
- 1,000 queued jobs of those 50 users (a few users own many jobs), enqueued over the last 2
  days: ~60 % "any N GPUs" (N in 1, 2, 4, 8) on any host, ~30 % any N on a given host, ~10 %
  named GPUs (1-4 of one host); 10 % of them have 2-3 tasks; max_runtime None (40 %) or
  1-24 h; 2 % have GPUs to avoid.

Measurement: `schedule(state)` timed with time.perf_counter over 200 passes (--quick: 10),
after 3 warm-up passes; the same with `hold_after` = 1 h (the anti-starvation hold), and
`queue_order` alone. Target: p99 < 100 ms per pass on 2 cores (the pass is single-threaded).
`--profile` prints the top functions of one default pass under cProfile. The last line is
machine-readable: `RESULT pass_p50_ms=<n> pass_p99_ms=<n>`.
"""

from __future__ import annotations

import collections
import cProfile
import io
import math
import pstats
import random
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta

import _common as common

from services.jobs.queue.model import (
    Booking,
    Decision,
    Demand,
    Gpu,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    RunningJob,
    Start,
    Waiting,
)
from services.jobs.queue.scheduler import queue_order, schedule

HOSTS = 125
GPUS_PER_HOST = 8
BUSY_SHARE = 0.30
RESERVATIONS = 5_000
RUNNING = 100
QUEUED = 1_000
USERS = [f"user{i:02d}" for i in range(50)]
SIZES = ((1, 50), (2, 25), (4, 15), (8, 10))  # GPUs per reservation, weight
NOW = datetime(2026, 11, 23, 9, 30, tzinfo=UTC)
HOUR = timedelta(hours=1)
TARGET_P99_MS = 100.0
WARMUP = 3


# --- the state --------------------------------------------------------------------------------


def make_state(seed: int) -> QueueState:  # noqa: C901 - builds a random fleet, reservations and queue in one place
    rng = random.Random(seed)
    hosts = [f"node{h:03d}" for h in range(HOSTS)]
    gpus: dict[str, Gpu] = {}
    for host in hosts:
        for index in range(GPUS_PER_HOST):
            uuid = f"GPU-{rng.getrandbits(64):016x}"
            gpus[uuid] = Gpu(uuid, host, index, rng.random() < BUSY_SHARE)
    by_host: dict[str, list[str]] = collections.defaultdict(list)
    for gpu in gpus.values():
        by_host[gpu.host].append(gpu.uuid)

    taken: dict[str, list[tuple[datetime, datetime]]] = collections.defaultdict(list)
    bookings: dict[str, list[Booking]] = collections.defaultdict(list)
    made = 0
    while made < RESERVATIONS:
        host = rng.choice(hosts)
        size = rng.choices([s for s, _ in SIZES], [w for _, w in SIZES])[0]
        chosen = rng.sample(by_host[host], size)
        start = NOW + timedelta(minutes=rng.randrange(-24 * 60, 14 * 24 * 60))
        end = start + timedelta(minutes=round(60 * math.exp(rng.uniform(0, math.log(48)))))
        if any(s < end and start < e for uuid in chosen for s, e in taken[uuid]):
            continue
        made += 1
        owner = rng.choice(USERS)
        guests = frozenset(rng.sample(USERS, rng.randint(1, 3))) if rng.random() < 0.1 else None
        booking = Booking(made, owner, (guests or frozenset()) - {owner}, start, end)
        for uuid in chosen:
            taken[uuid].append((start, end))
            bookings[uuid].append(booking)
    for uuid_bookings in bookings.values():
        uuid_bookings.sort(key=lambda b: b.start)

    running: list[RunningJob] = []
    busy_by_host = {host: [u for u in by_host[host] if gpus[u].busy] for host in hosts}
    for job_id in range(1, RUNNING + 1):
        host = rng.choice([h for h in hosts if busy_by_host[h]])
        pool = busy_by_host[host]
        chosen = rng.sample(pool, rng.randint(1, len(pool)))
        for uuid in chosen:
            pool.remove(uuid)
        owner = rng.choice(USERS)
        interrupted: frozenset[int] = frozenset()
        if rng.random() < 0.2:
            ids = [b.reservation_id for u in chosen for b in bookings.get(u, ())]
            interrupted = frozenset(rng.sample(ids, min(2, len(ids))))
        running.append(RunningJob(job_id, owner, frozenset(chosen), True, interrupted))

    weights = [1.0 / (i + 1) for i in range(len(USERS))]  # a few users own many jobs
    queue: list[QueuedJob] = []
    avoid: dict[int, frozenset[str]] = {}
    for job_id in range(10_001, 10_001 + QUEUED):
        owner = rng.choices(USERS, weights)[0]
        kind = rng.random()
        tasks = rng.choice((2, 3)) if rng.random() < 0.1 else 1
        demands = []
        for index in range(tasks):
            n = rng.choice((1, 2, 4, 8))
            if kind < 0.6:
                demands.append(Demand(index, None, gpu_count=n))
            elif kind < 0.9:
                demands.append(Demand(index, rng.choice(hosts), gpu_count=n))
            else:
                host = rng.choice(hosts)
                named = tuple(rng.sample(by_host[host], rng.randint(1, 4)))
                demands.append(Demand(index, host, gpus=named))
        runtime = None if rng.random() < 0.4 else timedelta(hours=rng.randint(1, 24))
        enqueued = NOW - timedelta(seconds=rng.randrange(2 * 24 * 3600))
        queue.append(QueuedJob(job_id, owner, enqueued, tuple(demands), runtime))
        if rng.random() < 0.02:
            avoid[job_id] = frozenset(rng.sample(list(gpus), 8))
    return QueueState(
        now=NOW,
        gpus=gpus,
        bookings=dict(bookings),
        queue=queue,
        running=running,
        avoid=avoid,
    )


# --- figures ----------------------------------------------------------------------------------


def timed(passes: int, call: Callable[[], object]) -> common.Latencies:
    for _ in range(WARMUP):
        call()
    figures = common.Latencies()
    for _ in range(passes):
        started = time.perf_counter()
        call()
        figures.add(started)
    return figures


def outcome(decisions: list[Decision]) -> str:
    kinds = collections.Counter(type(d).__name__ for d in decisions)
    given = sum(len(g) for d in decisions if isinstance(d, Start) for _, g in d.placement.values())
    why = collections.Counter(_reason_kind(d.reason) for d in decisions if isinstance(d, Waiting))
    reasons = ", ".join(f"{k} {n}" for k, n in why.most_common())
    return (
        f"{kinds[Start.__name__]} started ({given} GPUs), {kinds[Waiting.__name__]} waiting "
        f"({reasons}); {kinds[Interrupt.__name__]} interrupts, {kinds[Kill.__name__]} kills"
    )


def _reason_kind(reason: str) -> str:
    for word in ("kept for", "reserved", "busy", "goes to", "no host", "free for", "access"):
        if word in reason:
            return word
    return "other"


def report(
    state: QueueState,
    rows: list[tuple[str, common.Latencies]],
    decisions: list[Decision],
    seed: int,
) -> None:
    bookings = {b.reservation_id for bs in state.bookings.values() for b in bs}
    busy = sum(g.busy for g in state.gpus.values())
    print()
    common.print_machine(sharing="other processes share the cores")
    print(
        f"state:   {len(state.gpus)} GPUs on {HOSTS} hosts, {busy} busy; {len(bookings)} "
        f"reservations ({sum(map(len, state.bookings.values()))} GPU bookings); "
        f"{len(state.running)} running preemptible jobs; {len(state.queue)} queued jobs of "
        f"{len({j.owner for j in state.queue})} users; seed {seed}"
    )
    print(f"pass:    {outcome(decisions)}")
    print()
    table = []
    for i, (label, figures) in enumerate(rows):
        target = f"p99 < {TARGET_P99_MS:.0f}" if i < 2 else ""
        judged = common.verdict(figures.p99 < TARGET_P99_MS) if target else ""
        ms = (figures.p50, figures.p99, figures.max, figures.mean)
        table.append([label, str(figures.count), *(f"{x:.1f}" for x in ms), target, judged])
    common.print_table(
        ["operation", "passes", "p50 ms", "p99 ms", "max ms", "mean ms", "target", "verdict"],
        table,
        "<>>>>><<",
    )


def profile(state: QueueState) -> None:
    profiler = cProfile.Profile()
    profiler.enable()
    schedule(state)
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(15)
    print(out.getvalue())


def main(argv: list[str] | None = None) -> int:
    ap = common.argument_parser(__doc__, "10 passes")
    ap.add_argument("--passes", type=int, help="timed passes (200; --quick: 10)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (1)")
    ap.add_argument("--profile", action="store_true", help="cProfile one pass, print the top")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    passes = args.passes or (10 if args.quick else 200)
    started = time.monotonic()
    state = make_state(args.seed)
    print(f"state built in {time.monotonic() - started:.1f}s; timing {passes} passes ...")
    if args.profile:
        profile(state)
    held = replace(state, hold_after=HOUR)
    rows = [
        ("schedule()", timed(passes, lambda: schedule(state))),
        ("schedule(), hold_after = 1 h", timed(passes, lambda: schedule(held))),
        ("queue_order() alone", timed(passes, lambda: queue_order(state.queue))),
    ]
    report(state, rows, schedule(state), args.seed)
    first = rows[0][1]
    common.print_result(pass_p50_ms=f"{first.p50:.1f}", pass_p99_ms=f"{first.p99:.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
