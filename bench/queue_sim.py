"""Fair share against FIFO, and the predicted starts' error, on a simulated lab.

Usage::

    .venv/bin/python bench/queue_sim.py [--quick] [--days N] [--seed N]

A synthetic lab (bench/_queue_sim_lab.py: 16 users on 8 hosts x 8 GPUs; one heavy user's
bursts of 4-GPU trainings, 4 medium users, 11 light users with many short debug jobs;
reservations booked 1-24 h ahead) is run through the real queue pass
(`services.jobs.queue.scheduler.schedule`) in the order of the real policy
(`services.jobs.queue.fairshare`), with a simulated clock, once with `[queue] policy = "fifo"`
and once with "fair" (half-life 7 days, starve_after 72 h), the same workload both times. The
fair run also asks the real forecast (`services.jobs.queue.forecast.predict_starts`) every
hour and keeps each waiting job's first predicted start.

Figures, per policy: mean and p95 wait (enqueued to first start; a job never started by the end
counts until the end) per user class; Jain's fairness index of each user's GPU-hours against
their entitlement (capacity left by reservations, split max-min fairly over the users'
demands with equal shares: 1 is perfectly fair); GPU utilisation (GPU-hours busy with jobs or
reserved over all GPU-hours); interruptions per job started (Interrupt and Kill decisions);
and for the fair run the predicted start's error |predicted - actual| (median, p90) against
the median wait of the same jobs (target: under 15 %). Targets: fair share below FIFO on the
light users' p95 wait and above it on the fairness index, its utilisation at most 2 points
lower. Last line: `RESULT fairness_index=... p95_wait_light_users_min=... utilisation=...
eta_median_error_min=... eta_p90_error_min=... interruptions_per_job=...` (the fair run's).
"""

from __future__ import annotations

import statistics
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

import _common as common
from _queue_sim_lab import (
    CLASS,
    GPUS_PER_HOST,
    HOSTS,
    T0,
    USERS,
    Simulation,
    make_workload,
)

H = timedelta(hours=1)


@dataclass
class Figures:
    waits: dict[str, list[float]]  # class -> minutes
    fairness: float
    utilisation: float
    interruptions: float
    eta_errors: list[float]  # minutes
    eta_waits: list[float]  # the waits of the jobs predicted, minutes
    jobs: int
    started: int
    passes: int
    seconds: float


def entitlements(demand: dict[str, float], capacity: float) -> dict[str, float]:
    """Max-min fair split of `capacity` over `demand` (equal shares): water-filling."""
    left, users, out = capacity, sorted(demand, key=demand.get), {}  # type: ignore[arg-type]
    for i, user in enumerate(users):
        fair = left / (len(users) - i)
        out[user] = min(demand[user], fair)
        left -= out[user]
    return out


def jain(values: list[float]) -> float:
    if not values or not any(values):
        return float("nan")
    return sum(values) ** 2 / (len(values) * sum(v * v for v in values))


def measure(sim: Simulation, seconds: float) -> Figures:
    end = sim.end
    waits: dict[str, list[float]] = defaultdict(list)
    used: dict[str, float] = defaultdict(float)
    demand: dict[str, float] = defaultdict(float)
    busy: dict[str, list[tuple[datetime, datetime]]] = defaultdict(list)
    interruptions = started = 0
    eta_errors, eta_waits = [], []
    for job in sim.jobs.values():
        demand[job.owner] += job.gpus * (job.runtime / H)
        first = job.first_start if job.first_start is not None else end
        waits[CLASS[job.owner]].append((first - job.enqueued_at) / timedelta(minutes=1))
        runs = list(job.runs)
        if job.started_at is not None and job.id in sim.running:
            runs.append((job.started_at, end, job.placed))
        for s, e, placed in runs:
            used[job.owner] += job.gpus * ((min(e, end) - s) / H)
            for g in placed:
                busy[g].append((s, min(e, end)))
        if job.first_start is not None:
            started += 1
            interruptions += job.interruptions
            if job.predicted is not None:
                eta_errors.append(abs(job.predicted - job.first_start) / timedelta(minutes=1))
                eta_waits.append((job.first_start - job.enqueued_at) / timedelta(minutes=1))
    reserved = 0.0
    for booking, gpus in sim.booked:
        s, e = max(booking.start, T0), min(booking.end, end)
        if s < e:
            reserved += gpus * ((e - s) / H)
            for g in sim.gpus_of_booking[booking.reservation_id]:
                busy[g].append((s, e))
    total = len(HOSTS) * GPUS_PER_HOST * ((end - T0) / H)
    shares = entitlements(dict(demand), total - reserved)
    fairness = jain([used[u] / shares[u] for u in USERS if shares.get(u)])
    return Figures(
        waits=dict(waits),
        fairness=fairness,
        utilisation=sum(_union(v) for v in busy.values()) / total,
        interruptions=interruptions / max(started, 1),
        eta_errors=eta_errors,
        eta_waits=eta_waits,
        jobs=len(sim.jobs),
        started=started,
        passes=sim.passes,
        seconds=seconds,
    )


def _union(spans: list[tuple[datetime, datetime]]) -> float:
    hours, last = 0.0, None
    for s, e in sorted(spans):
        if last is not None and s < last:
            s = last
        if e > s:
            hours += (e - s) / H
            last = e
    return hours


def run(fair: bool, days: float, seed: int) -> Figures:
    work = make_workload(seed, days)
    began = time.perf_counter()
    sim = Simulation(work, fair=fair, days=days, forecast_every=H if fair else None)
    sim.run()
    return measure(sim, time.perf_counter() - began)


def p95(values: list[float]) -> float:
    return common.percentile(values, 95)


def main(argv: list[str] | None = None) -> int:
    ap = common.argument_parser(__doc__, "2 simulated days")
    ap.add_argument("--days", type=float, help="simulated days (7; --quick: 2)")
    ap.add_argument("--seed", type=int, default=1, help="the workload's seed (1)")
    args = ap.parse_args(argv)
    days = args.days or (2.0 if args.quick else 7.0)
    fifo, fair = run(False, days, args.seed), run(True, days, args.seed)
    common.print_machine(sharing="other processes share the cores")
    print(
        f"lab:     {len(USERS)} users on {len(HOSTS)} hosts x {GPUS_PER_HOST} GPUs, "
        f"{days:g} simulated days, seed {args.seed}: {fair.jobs} jobs"
    )
    print(
        f"runs:    fifo {fifo.passes} passes in {fifo.seconds:.0f} s, "
        f"fair {fair.passes} passes in {fair.seconds:.0f} s\n"
    )
    rows = []
    for name in ("light", "medium", "heavy"):
        for label, f in (("fifo", fifo), ("fair", fair)):
            w = f.waits.get(name, [])
            rows.append(
                [
                    f"{name} users",
                    label,
                    str(len(w)),
                    f"{statistics.fmean(w):.0f}" if w else "-",
                    f"{p95(w):.0f}",
                ]
            )
    common.print_table(["class", "policy", "jobs", "mean wait min", "p95 wait min"], rows, "<<>>>")
    print()
    common.print_table(
        ["policy", "fairness index", "utilisation", "interruptions/job", "started"],
        [
            [
                label,
                f"{f.fairness:.3f}",
                f"{f.utilisation * 100:.1f} %",
                f"{f.interruptions:.3f}",
                f"{f.started}/{f.jobs}",
            ]
            for label, f in (("fifo", fifo), ("fair", fair))
        ],
        "<>>>>",
    )
    errors, predicted_waits = fair.eta_errors, fair.eta_waits
    median_error = statistics.median(errors) if errors else float("nan")
    p90_error = common.percentile(errors, 90)
    median_wait = statistics.median(predicted_waits) if predicted_waits else float("nan")
    print(
        f"\npredicted starts (fair): {len(errors)} jobs predicted while waiting; "
        f"|predicted - actual| median {median_error:.1f} min, p90 {p90_error:.1f} min; "
        f"their median wait {median_wait:.1f} min"
    )
    light_fifo, light_fair = p95(fifo.waits["light"]), p95(fair.waits["light"])
    checks = [
        ("light users' p95 wait lower with fair share", light_fair < light_fifo),
        ("fairness index higher with fair share", fair.fairness > fifo.fairness),
        ("utilisation at most 2 points lower", fair.utilisation >= fifo.utilisation - 0.02),
        (
            "predicted start's median error < 15 % of the median wait",
            median_error < 0.15 * median_wait,
        ),
    ]
    for what, met in checks:
        print(f"target: {what}: {common.verdict(met)}")
    common.print_result(
        fairness_index=f"{fair.fairness:.3f}",
        p95_wait_light_users_min=f"{light_fair:.0f}",
        utilisation=f"{fair.utilisation:.3f}",
        eta_median_error_min=f"{median_error:.1f}",
        eta_p90_error_min=f"{p90_error:.1f}",
        interruptions_per_job=f"{fair.interruptions:.3f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
