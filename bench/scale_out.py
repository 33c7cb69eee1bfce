"""Scale-out and failover (issue 18): a fleet's hosts sharded over two monitor replicas, one of
them killed; the violations leader killed with incidents open.

Usage::

    .venv/bin/python bench/scale_out.py [--quick] [--hosts N] [--interval S]

Each part runs in a temporary folder of its own, on a fresh RabbitMQ vhost (made with
rabbitmqctl on amqp://guest:guest@127.0.0.1:5672/) and a fresh PostgreSQL database (on
postgresql://postgres@127.0.0.1:5432), all removed afterwards, also on error or Ctrl-C:

1. Monitor sharding (`measure_monitor_sharding`, bench/_monitor_sharding.py): `warden sim` with
   N hosts x 8 GPUs (default 2,000, the aim; --quick: 100 at a 2 s interval), two `warden run
   monitor` processes splitting them by rendezvous hashing over the replicas they hear; after
   a warm-up and their standby connections open, the sample age (a host's tick to its events
   published) over 4 intervals (the p99 given is the larger of the two replicas' p99s); then
   one replica is killed with SIGKILL and `monitor_failover_s` is the kill to the moment every
   host it polled has a sample taken after the kill; then it rejoins (double polls and gaps
   counted).
2. Violations failover (`measure_violations_failover`, bench/_violations_failover.py): two
   `warden run violations` processes (lease 6 s), a monitor and a reservations double, a real
   webhook receiver; in each of 3 rounds (--quick: 1) 16 squats (--quick: 4) are escalated,
   the leader is killed with SIGKILL and fresh squats start at once; `violations_failover_s`
   is the kill to the first step the new leader takes for a fresh squat (the worst round);
   `duplicate_notifications` counts steps the receiver got twice, `lost_incidents` squats it
   never heard of.

Targets: p99 sample age < 1,000 ms, both failovers < 10 s, 0 duplicates, 0 lost. The last line:
`RESULT hosts=<n> p99_sample_age_ms=<n> monitor_failover_s=<n> violations_failover_s=<n>
duplicate_notifications=<n> lost_incidents=<n>`.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

import _common as common
from _monitor_sharding import measure_monitor_sharding
from _violations_failover import measure_violations_failover, postgres_database

from services.shared.errors import WardenError

ADMIN_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"
# The aim, met on 2 cores shared with the simulator since the standby connections
# (see bench/README.md).
AIM_HOSTS = HOSTS = 2_000
QUICK_HOSTS = 100
INTERVAL_S, QUICK_INTERVAL_S = 5.0, 2.0
TARGET_P99_MS = 1_000.0
TARGET_FAILOVER_S = 10.0


async def monitor_part(hosts: int, interval_s: float, quick: bool) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="warden-scale-out-monitor-") as tmp,
        common.rabbitmq_vhost(common.DEFAULT_AMQP_URL, "warden-bench-scale-out") as amqp_url,
    ):
        async with postgres_database(ADMIN_PG_URL) as pg_url:
            return await measure_monitor_sharding(
                Path(tmp),
                hosts=hosts,
                interval_s=interval_s,
                amqp_url=amqp_url,
                pg_url=pg_url,
                quick=quick,
            )


async def violations_part(quick: bool) -> dict[str, Any]:
    with (
        tempfile.TemporaryDirectory(prefix="warden-scale-out-violations-") as tmp,
        common.rabbitmq_vhost(common.DEFAULT_AMQP_URL, "warden-bench-scale-out") as amqp_url,
    ):
        async with postgres_database(ADMIN_PG_URL) as pg_url:
            return await measure_violations_failover(
                Path(tmp), amqp_url=amqp_url, pg_url=pg_url, quick=quick
            )


async def run(hosts: int, interval_s: float, quick: bool) -> tuple[dict[str, Any], ...]:
    """Both parts; one that fails (say, the replicas never settle on a split on a machine too
    busy for the fleet) is reported with its reason and its figures as nan."""
    parts: list[dict[str, Any]] = []
    for name, part in (
        ("monitor sharding", lambda: monitor_part(hosts, interval_s, quick)),
        ("violations failover", lambda: violations_part(quick)),
    ):
        try:
            parts.append(await part())
        except (RuntimeError, WardenError) as err:  # a replica that never settled or answered
            print(f"{name} failed: {str(err).splitlines()[0]}", flush=True)
            parts.append({"failed": str(err).splitlines()[0]})
    return tuple(parts)


def figure(value: Any, digits: int = 1) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:,.{digits}f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def whole(value: float, digits: int = 0) -> object:
    """For the RESULT line: rounded, or nan when it was not measured."""
    if math.isnan(value):
        return "nan"
    return round(value, digits) if digits else round(value)


def main() -> None:
    parser = common.argument_parser(
        __doc__, f"{QUICK_HOSTS} hosts at {QUICK_INTERVAL_S:g} s, one violations round"
    )
    parser.add_argument("--hosts", type=int, help=f"simulated hosts (default {HOSTS:,})")
    parser.add_argument("--interval", type=float, help=f"poll interval (default {INTERVAL_S:g})")
    args = parser.parse_args()
    hosts = args.hosts or (QUICK_HOSTS if args.quick else HOSTS)
    interval_s = args.interval or (QUICK_INTERVAL_S if args.quick else INTERVAL_S)
    print(
        f"scale-out: {hosts:,} hosts x 8 GPUs every {interval_s:g} s over 2 monitor replicas; "
        "2 violations replicas, the leader killed"
    )
    monitor, violations = common.run_async(
        run(hosts, interval_s, args.quick),
        "replicas and simulator stopped, vhosts, databases and folders removed",
    )
    nan = float("nan")
    p99 = float(monitor.get("p99_sample_age_ms", nan))
    monitor_s = float(monitor.get("monitor_failover_s", nan))
    violations_s = float(violations.get("violations_failover_s", nan))
    duplicates = violations.get("duplicate_notifications", "nan")
    lost = violations.get("lost_incidents", "nan")
    print()
    common.print_machine(
        f"RabbitMQ {common.rabbitmq_version()}",
        sharing="the replicas, the simulator, RabbitMQ, PostgreSQL and this script share it",
    )
    print()
    rows: list[list[str] | str] = ["monitor sharding (2 replicas)"]
    for key in (
        "failed",
        "hosts",
        "gpus",
        "interval_s",
        "hosts_per_replica",
        "p50_sample_age_ms",
        "p99_sample_age_ms",
        "max_sample_age_ms",
        "polls",
        "expected_polls",
        "missed_ticks",
        "failures",
        "monitor_cpu_percent",
        "monitor_rss_mib",
        "sim_cpu_percent",
        "standby_open_s",
        "monitor_failover_s",
        "failover_taken_over_s",
        "failover_half_fresh_s",
        "failover_p90_fresh_s",
        "failover_hosts",
        "rejoin_split_s",
        "rejoin_double_polls",
        "rejoin_gaps",
    ):
        if key in monitor:
            rows.append([f"  {key}", figure(monitor[key])])
    rows.append("violations failover (2 replicas, leader killed)")
    if "failed" in violations:
        rows.append(["  failed", violations["failed"]])
    for n, each in enumerate(violations.get("rounds", []), 1):
        rows.append(
            [
                f"  round {n}",
                f"{figure(float(each['failover_s']), 2)} s, {each['squats']} squats, "
                f"{each['duplicates']} duplicates, {each['lost']} lost",
            ]
        )
    rows.append(["  violations_failover_s (worst round)", figure(violations_s, 2)])
    common.print_table(["figure", "value"], rows, "<<")
    print()
    dup_n = float(duplicates) if isinstance(duplicates, int) else nan
    lost_n = float(lost) if isinstance(lost, int) else nan
    verdicts = [
        ("p99 sample age", f"{figure(p99)} ms", f"< {TARGET_P99_MS:,.0f} ms", p99, TARGET_P99_MS),
        ("monitor failover", f"{figure(monitor_s)} s", f"< {TARGET_FAILOVER_S:g} s", monitor_s,
         TARGET_FAILOVER_S),
        ("violations failover", f"{figure(violations_s, 2)} s", f"< {TARGET_FAILOVER_S:g} s",
         violations_s, TARGET_FAILOVER_S),
        ("duplicate notifications", str(duplicates), "0", dup_n, 0.5),
        ("lost incidents", str(lost), "0", lost_n, 0.5),
    ]  # fmt: skip
    common.print_table(
        ["target", "measured", "aim", "verdict"],
        [[n, got, aim, common.verdict(v < bound, v)] for n, got, aim, v, bound in verdicts],
        "<><<",
    )
    if hosts < AIM_HOSTS:
        print(f"(aim: {AIM_HOSTS:,} hosts x 8 GPUs at {INTERVAL_S:g} s; this run: {hosts:,})")
    common.print_result(
        hosts=hosts,
        p99_sample_age_ms=whole(p99),
        monitor_failover_s=whole(monitor_s, 1),
        violations_failover_s=whole(violations_s, 1),
        duplicate_notifications=duplicates,
        lost_incidents=lost,
    )


if __name__ == "__main__":
    main()
