"""How far one monitor process scales: N simulated hosts x 8 GPUs, polled every 5 s over SSH.

Usage::

    .venv/bin/python bench/monitor_scale.py [--quick] [--sizes 10,100,500,1000]

For each fleet size N (default 10, 100, 500, 1,000 hosts; --quick: 10 and 50):

1. `warden sim --hosts N --gpus-per-host 8` in its own process (churn on: processes come and
   go), on free ports; it writes `[[hosts]]` TOML, known_hosts and a client key into a
   temporary folder. Ready when it prints "Ctrl-C to stop". (`warden` is run as
   `python -m services.cli` from this checkout: what `.venv/bin/warden` runs here.)
2. A full warden.toml there (data_dir in the folder, [bus] amqp_url, [monitor] interval_s,
   [ssh] known_hosts, local_nvml = "off", the simulator's [[hosts]]); `warden db upgrade
   monitor`.
3. `warden run monitor` in its own process, on RabbitMQ (its own vhost, made with rabbitmqctl
   and deleted at the end), as in production. Its events go to the `monitor.events` exchange;
   no queue is bound to it here, so the broker confirms and drops them (publishing cost is
   real, routing/storing is not).
4. From this process an `AmqpBus` client calls `monitor.stats`: once the monitor answers, a
   warm-up of 2 intervals (--quick: 1; the first polls include SSH handshakes), then
   `{"reset": true}`, M intervals (4; --quick: 3) of measurement, then `monitor.stats` again.
   CPU % of the monitor and the simulator over that window come from /proc/PID/stat (utime +
   stime, all threads; the monitor's main thread, which runs the event loop, also on its own),
   the monitor's RSS from /proc/PID/status (VmRSS) at the end.

Sample age (from the monitor's stats) is the time from a host's scheduled tick to its events
being published (confirmed by the broker): what a consumer of `host.sampled` sees as staleness.
Missed ticks are ticks a poll loop could not even start within their interval.

Both processes are stopped (SIGTERM, then SIGKILL) and the vhost and temporary folder removed,
also on error or Ctrl-C. The last line is machine-readable, for the largest N run:
`RESULT hosts=<n> gpus=<n> p99_sample_age_ms=<n> missed_ticks=<n> monitor_cpu_percent=<n>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import _common as common

from services.shared.bus.amqp import AmqpBus
from services.shared.errors import WardenError

GPUS_PER_HOST = 8
WARMUP_INTERVALS = 2

TARGET_HOSTS = 1_000
TARGET_INTERVAL_S = 5.0
TARGET_P99_MS = 1_000.0


# --- processes ----------------------------------------------------------------------------------


# --- one fleet size -------------------------------------------------------------------------------


@dataclass
class Row:
    hosts: int
    gpus: int
    interval_s: float
    intervals: int
    seconds: float  # measured window (between the two stats calls)
    polls: int
    failures: int
    missed_ticks: int
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    monitor_cpu: float
    monitor_loop_cpu: float  # its main thread: the event loop
    monitor_rss_mib: float
    sim_cpu: float
    warmup: dict[str, Any]
    startup_s: dict[str, float]

    @property
    def expected_polls(self) -> int:
        return self.hosts * self.intervals

    @property
    def expected_pps(self) -> float:
        return self.hosts / self.interval_s

    @property
    def pps(self) -> float:
        return self.polls / self.seconds if self.seconds else 0.0


async def wait_for_monitor(bus: AmqpBus, child: common.Child, hosts: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        child.check_alive()
        try:
            answer = await bus.call("monitor", "stats", {}, timeout=2)
        except WardenError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the monitor did not answer within {timeout:.0f}s:\n{child.tail()}"
                ) from None
            await asyncio.sleep(0.2)
            continue
        if answer.get("hosts") == hosts:
            return
        # A replica takes its hosts a heartbeat and a half after it starts (docs/admins/replicas.md:
        # several monitor replicas): until then it answers with none.
        if time.monotonic() > deadline:
            raise RuntimeError(f"the monitor watches {answer.get('hosts')} hosts, not {hosts}")
        await asyncio.sleep(0.2)


async def migrate(config: Path, env: dict[str, str]) -> float:
    """`warden db upgrade monitor`; returns the seconds it took."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *common.warden_argv("db", "upgrade", "monitor", "--config", str(config)),
        cwd=common.REPO,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"warden db upgrade monitor failed:\n{stderr.decode()[-2000:]}")
    return time.monotonic() - started


async def run_size(
    n: int, interval_s: float, intervals: int, warmup_intervals: int, url: str, verbose: bool
) -> Row:
    tmp = Path(tempfile.mkdtemp(prefix=f"warden-monitor-scale-{n}-"))
    children: list[common.Child] = []
    bus: AmqpBus | None = None
    env = common.child_env(tmp)
    startup: dict[str, float] = {}

    def config(known_hosts: Path, hosts: list[dict[str, Any]] | None) -> Path:
        return common.write_config(
            tmp,
            known_hosts=known_hosts,
            hosts=hosts,
            log={"level": "info"},
            bus={"amqp_url": url},
            monitor={"interval_s": interval_s},
        )

    try:
        t0 = time.monotonic()
        options = ["--hosts", str(n), "--gpus-per-host", str(GPUS_PER_HOST), "--port", "0"]
        sim = common.start_sim(tmp, env, *options)
        children.append(sim)
        # The migration needs no hosts: it runs while the simulator starts.
        migrating = asyncio.create_task(migrate(config(tmp / "sim" / "known_hosts", None), env))
        try:
            await sim.wait_for_line(common.SIM_READY, timeout_s=60 + n * 0.1)
            startup["sim"] = time.monotonic() - t0
        finally:
            startup["migrate"] = await migrating
        monitor_config = config(*common.sim_hosts(tmp))

        bus = AmqpBus(url, name=f"bench-monitor-scale-{os.getpid()}")
        await bus.start()
        t0 = time.monotonic()
        monitor = common.Child(
            "the monitor",
            common.warden_argv("run", "monitor", "--config", str(monitor_config)),
            tmp / "monitor.log",
            env,
        )
        children.append(monitor)
        await wait_for_monitor(bus, monitor, n, timeout=60)
        startup["monitor"] = time.monotonic() - t0

        await asyncio.sleep(warmup_intervals * interval_s)
        sim.check_alive()
        monitor.check_alive()
        warmup = await bus.call("monitor", "stats", {"reset": True}, timeout=10)
        started = time.monotonic()
        mon_cpu0, sim_cpu0 = common.cpu_seconds(monitor.pid), common.cpu_seconds(sim.pid)
        loop_cpu0 = common.cpu_seconds(monitor.pid, monitor.pid)

        await asyncio.sleep(intervals * interval_s)

        figures = await bus.call("monitor", "stats", {}, timeout=10)
        seconds = time.monotonic() - started
        mon_cpu1, sim_cpu1 = common.cpu_seconds(monitor.pid), common.cpu_seconds(sim.pid)
        loop_cpu1 = common.cpu_seconds(monitor.pid, monitor.pid)
        rss = common.rss_mib(monitor.pid)
        sim.check_alive()
        monitor.check_alive()
        if verbose:
            print(f"--- monitor log (N={n}), last lines:\n{monitor.tail(10)}", flush=True)
        ages = figures["sample_age_ms"]
        return Row(
            hosts=n,
            gpus=n * GPUS_PER_HOST,
            interval_s=interval_s,
            intervals=intervals,
            seconds=seconds,
            polls=figures["polls"],
            failures=figures["failures"],
            missed_ticks=figures["missed_ticks"],
            samples=ages["count"],
            p50_ms=ages["p50"],
            p99_ms=ages["p99"],
            max_ms=ages["max"],
            monitor_cpu=(mon_cpu1 - mon_cpu0) / seconds * 100,
            monitor_loop_cpu=(loop_cpu1 - loop_cpu0) / seconds * 100,
            monitor_rss_mib=rss,
            sim_cpu=(sim_cpu1 - sim_cpu0) / seconds * 100,
            warmup=warmup,
            startup_s=startup,
        )
    finally:
        if bus is not None:
            with contextlib.suppress(Exception):
                await bus.close()
        for child in reversed(children):  # the monitor first, then the simulator
            child.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --- report ---------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def report(rows: list[Row], args: argparse.Namespace, rmq_version: str) -> None:
    print()
    common.print_machine(
        f"RabbitMQ {rmq_version}", sharing="monitor, simulator and RabbitMQ share it"
    )
    print(
        f"setup:   `warden sim` + `warden run monitor` (RabbitMQ, own vhost) in two processes; "
        f"warm-up {args.warmup} interval(s), then {args.intervals} measured; "
        "events published to monitor.events with no queue bound (broker drops them)"
    )
    print()
    common.print_table(
        [
            "hosts",
            "gpus",
            "int s",
            "polls/s exp",
            "polls/s got",
            "polls",
            "p50 ms",
            "p99 ms",
            "max ms",
            "missed",
            "fail",
            "mon CPU%",
            "mon RSS MiB",
            "sim CPU%",
        ],
        [
            [
                f"{r.hosts:,}",
                f"{r.gpus:,}",
                f"{r.interval_s:g}",
                f"{r.expected_pps:.1f}",
                f"{r.pps:.1f}",
                f"{r.polls}/{r.expected_polls}",
                _ms(r.p50_ms),
                _ms(r.p99_ms),
                _ms(r.max_ms),
                str(r.missed_ticks),
                str(r.failures),
                f"{r.monitor_cpu:.0f}",
                f"{r.monitor_rss_mib:.0f}",
                f"{r.sim_cpu:.0f}",
            ]
            for r in rows
        ],
        ">" * 14,
    )
    print(
        "(sample age: scheduled tick -> events published; CPU %: of one core, over the "
        "measured window; 'polls' achieved/expected = hosts x intervals)"
    )
    print("side figures:")
    for r in rows:
        w = r.warmup
        wages = w.get("sample_age_ms", {})
        s = r.startup_s
        print(
            f"  N={r.hosts:<5} start-up: sim {s.get('sim', 0):.1f}s, migrate "
            f"{s.get('migrate', 0):.1f}s, monitor {s.get('monitor', 0):.1f}s; warm-up: "
            f"{w.get('polls')} polls, {w.get('failures')} failures, "
            f"{w.get('missed_ticks')} missed, p99 {_ms(wages.get('p99'))} ms, "
            f"max {_ms(wages.get('max'))} ms; monitor CPU: event loop {r.monitor_loop_cpu:.0f}%, "
            f"other threads {r.monitor_cpu - r.monitor_loop_cpu:.0f}%"
        )
    print()
    target = [r for r in rows if r.hosts >= TARGET_HOSTS and r.interval_s <= TARGET_INTERVAL_S]
    print(
        f"targets: {TARGET_HOSTS:,} hosts x {GPUS_PER_HOST} GPUs every {TARGET_INTERVAL_S:g}s, "
        f"p99 sample age < {TARGET_P99_MS:,.0f} ms, no missed ticks"
    )
    if not target:
        print(f"  not run (largest N here: {max(r.hosts for r in rows):,})")
    for r in target:
        p99_ok = r.p99_ms is not None and r.p99_ms < TARGET_P99_MS
        all_polled = r.polls >= r.expected_polls * 0.98 and r.failures == 0
        print(
            f"  N={r.hosts:,}: p99 {_ms(r.p99_ms)} ms {common.verdict(p99_ok)}; missed ticks "
            f"{r.missed_ticks} {common.verdict(r.missed_ticks == 0)}; polls {r.polls}/"
            f"{r.expected_polls}, failures {r.failures} {common.verdict(all_polled)}"
        )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "N=10 and 50, 1 + 3 intervals")
    ap.add_argument("--sizes", help="comma-separated host counts (default 10,100,500,1000)")
    ap.add_argument("--interval", type=float, default=5.0, help="monitor interval_s (5)")
    ap.add_argument("--intervals", type=int, help="measured intervals (4; --quick: 3)")
    ap.add_argument(
        "--warmup", type=int, help=f"warm-up intervals ({WARMUP_INTERVALS}; --quick: 1)"
    )
    ap.add_argument(
        "--amqp-url", default=common.DEFAULT_AMQP_URL, help="broker (a vhost is made on it)"
    )
    ap.add_argument("-v", "--verbose", action="store_true", help="show the monitor's log tail")
    args = ap.parse_args(argv)
    if args.sizes:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    else:
        args.sizes = [10, 50] if args.quick else [10, 100, 500, 1000]
    if args.intervals is None:
        args.intervals = 3 if args.quick else 4
    if args.warmup is None:
        args.warmup = 1 if args.quick else WARMUP_INTERVALS
    return args


async def run_all(args: argparse.Namespace) -> list[Row]:
    rows = []
    with common.rabbitmq_vhost(args.amqp_url, "warden-bench-monitor") as url:
        for n in args.sizes:
            print(
                f"N={n:,} hosts x {GPUS_PER_HOST} GPUs, interval {args.interval:g}s ...", flush=True
            )
            row = await run_size(n, args.interval, args.intervals, args.warmup, url, args.verbose)
            print(
                f"  polls {row.polls}/{row.expected_polls}, p99 {_ms(row.p99_ms)} ms, missed "
                f"{row.missed_ticks}, failures {row.failures}, monitor CPU {row.monitor_cpu:.0f}%",
                flush=True,
            )
            rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    rmq_version = common.rabbitmq_version()
    rows = common.run_async(run_all(args), "processes stopped, vhost and temporary files removed")
    report(rows, args, rmq_version)
    last = max(rows, key=lambda r: r.hosts)
    common.print_result(
        hosts=last.hosts,
        gpus=last.gpus,
        p99_sample_age_ms="nan" if last.p99_ms is None else f"{last.p99_ms:.0f}",
        missed_ticks=last.missed_ticks,
        monitor_cpu_percent=f"{last.monitor_cpu:.0f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
