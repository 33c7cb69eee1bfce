"""How long from an offending process starting to `violation.opened` and to the webhook alert.

Usage::

    .venv/bin/python bench/violation_latency.py [--quick] [--hosts N] [--processes N]

Set-up (everything in this one process and its event loop, as `warden run all` would run it,
beside the simulated fleet it watches):

- `SimFleet(100 hosts x 8 GPUs, churn off)` served over real SSH by `SimServer` (one port per
  host, a fresh client key; --quick: 10 hosts). A temporary folder holds the key, known_hosts,
  warden.toml (its [[hosts]] from `server.hosts_config`) and the SQLite databases (embedded
  storage), migrated with `services.shared.storage.db.upgrade`; accounts admin, alice and bob
  are made in the reservations database (argon2 made cheap: nobody logs in).
- `run_services(["monitor", "reservations", "violations"], ..., bus_kind="inproc")` on an
  `InProcessBus`, the monitor polling every host every 2 s (`[monitor] interval_s`).
  [violations]: steps = ["0s webhook owner+admins"], handlers = ["webhook"], one
  `[[violations.webhooks]]` of format "json" posting to a local aiohttp receiver, and
  `webhook_min_interval_s = 0` (the default paces a URL to one message a second, which would
  queue 200 alerts behind each other and measure the pacing, not the pipeline).
- Once all 800 GPUs are known to the reservations service (`list_gpus`), 200 GPUs are drawn at
  random (seeded) and alice reserves them by RPC, one reservation per host holding its drawn
  GPUs, from now for 2 h. The bench waits for the reservation.created events.

Measurement: over 60 s (--quick: 20 processes over 10 s) user bob starts one process on each
drawn GPU at a uniformly random moment (`fleet.start_process`; its start time is the
`time.time()` read just before, handed to the sim as `started_at`). Recorded by receive time
(`time.time()`):

- violation.opened, matched by (host, pid), from a subscriber on the violations exchange;
- the first webhook delivery, matched by `incident.host` and the pid(s) of the json body;
- the first `processes.observed` of the monitor that lists the pid (its `observed_at` is when
  that poll began), to split the latency into waiting for a poll and the pipeline after it;
- event-loop lag (a 50 ms ticker), process CPU time and the main thread's CPU time.

The bench waits until every process has both, or until the last start + the deadline
(3 poll intervals + 5 s). `missed` counts processes without a violation.opened or without a
webhook within the deadline from their own start. Target (issue): p99 <= one poll interval +
300 ms, for both. The last line is machine-readable:
`RESULT interval_ms=<n> opened_p99_ms=<n> webhook_p99_ms=<n> missed=<n>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as common
import asyncssh
from _violation_latency_record import (
    HOOK_PATH,
    LoopLag,
    Recorder,
    subscribe_recorders,
    webhook_receiver,
)

from services.shared import toml
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.runtime import run_services
from services.sim.model import SimFleet
from services.sim.server import SimServer, raise_open_files_limit

GPUS_PER_HOST = 8
OFFENDER = "bob"
OWNER = "alice"
COMMAND = "python steal_gpu.py --epochs 100"
SERVICES = ["monitor", "reservations", "violations"]
STEPS = ["0s webhook owner+admins"]
RESERVATION_HOURS = 2
TARGET_SLACK_MS = 300.0  # target: p99 <= one poll interval + this
DEADLINE_INTERVALS = 3  # missed: nothing within this many intervals + DEADLINE_EXTRA_S
DEADLINE_EXTRA_S = 5.0
SETTLE_S = 1.0  # after the reservation events: the violations service applies them too


class ServicesStopped(RuntimeError):
    """run_services ended during the run: on SIGINT/SIGTERM (it handles them) or an error."""


@dataclass
class Config:
    hosts: int
    processes: int
    spread_s: float
    interval_s: float
    seed: int
    quick: bool

    @property
    def deadline_s(self) -> float:
        return DEADLINE_INTERVALS * self.interval_s + DEADLINE_EXTRA_S

    @property
    def target_ms(self) -> float:
        return self.interval_s * 1000 + TARGET_SLACK_MS


@dataclass
class Result:
    cfg: Config
    rec: Recorder
    lag: LoopLag
    window_s: float = 0.0  # first start to the end of the wait
    cpu_s: float = 0.0
    loop_cpu_s: float = 0.0
    threads: int = 0
    setup_s: dict[str, float] = field(default_factory=dict)
    reservations: int = 0
    late_starts_ms: list[float] = field(default_factory=list)  # start vs. its planned moment
    stop_s: float = 0.0


# --- set-up -------------------------------------------------------------------------------------


def config_file(
    tmp: Path, server: SimServer, key_file: Path, hook_url: str, interval_s: float
) -> Path:
    known_hosts = tmp / "known_hosts"
    known_hosts.write_text("\n".join(server.known_hosts_lines()) + "\n")
    return common.write_config(
        tmp,
        known_hosts=known_hosts,
        hosts=server.hosts_config("warden", key_file),
        monitor={"interval_s": interval_s},
        violations={
            "mode": "reservations",
            "steps": STEPS,
            "handlers": ["webhook"],
            "webhook_min_interval_s": 0,
            "webhooks": [{"url": hook_url, "format": "json", "name": "bench-receiver"}],
        },
    )


async def until(
    condition: Callable[[], Awaitable[bool] | bool],
    what: str,
    timeout_s: float,
    alive: Callable[[], None],
    step_s: float = 0.2,
) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        found = condition()
        if not isinstance(found, bool):
            found = await found
        if found:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:.0f}s")
        await asyncio.sleep(step_s)


async def discover_gpus(
    bus: InProcessBus, expected: int, timeout_s: float, alive: Callable[[], None]
) -> dict[tuple[str, int], str]:
    """(host, index) -> uuid, once the reservations service knows all `expected` GPUs."""
    known: dict[tuple[str, int], str] = {}

    async def all_known() -> bool:
        with contextlib.suppress(Exception):
            gpus = await bus.call("reservations", "list_gpus", {}, timeout=10)
            known.clear()
            known.update({(g["host"], int(g["index"])): str(g["uuid"]) for g in gpus})
        return len(known) >= expected

    await until(
        all_known, f"all {expected} GPUs known to the reservations service", timeout_s, alive, 0.5
    )
    return known


async def reserve(
    bus: InProcessBus, chosen: list[tuple[str, int]], uuids: dict[tuple[str, int], str]
) -> int:
    """One reservation of alice per host, holding that host's chosen GPUs, now to now + 2 h."""
    by_host: dict[str, list[str]] = {}
    for host, index in chosen:
        by_host.setdefault(host, []).append(uuids[(host, index)])
    for host, gpu_uuids in sorted(by_host.items()):
        start = datetime.now(UTC)
        await bus.call(
            "reservations",
            "create_reservation",
            {
                "actor": OWNER,
                "gpus": gpu_uuids,
                "start": start.isoformat(),
                "end": (start + timedelta(hours=RESERVATION_HOURS)).isoformat(),
                "title": f"bench {host}",
            },
            timeout=30,
        )
    return len(by_host)


# --- the run ------------------------------------------------------------------------------------


async def start_processes(
    fleet: SimFleet,
    plan: list[tuple[float, str, int]],
    rec: Recorder,
    result: Result,
    alive: Callable[[], None],
) -> None:
    """bob's processes at their planned moments (seconds after now), each start recorded."""
    loop = asyncio.get_running_loop()
    origin = loop.time()
    for delay, host, index in plan:
        await asyncio.sleep(max(0.0, origin + delay - loop.time()))
        alive()
        result.late_starts_ms.append(max(0.0, loop.time() - origin - delay) * 1000)
        started = time.time()
        pid = fleet.start_process(host, index, OFFENDER, COMMAND, started_at=started)
        rec.started[(host, pid)] = started


async def run(cfg: Config) -> Result:
    rng = random.Random(cfg.seed)
    rec = Recorder()
    lag = LoopLag()
    result = Result(cfg, rec, lag)
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-violations-"))
    t0 = time.monotonic()
    raise_open_files_limit(cfg.hosts * 4 + 512)
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp / "warden_key"
    key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    fleet = SimFleet(cfg.hosts, GPUS_PER_HOST, seed=cfg.seed, churn=False)
    receiver = await webhook_receiver(rec)
    hook_url = f"http://127.0.0.1:{receiver.addresses[0][1]}{HOOK_PATH}"
    try:
        async with SimServer(fleet, authorized_keys=[key.convert_to_public()]) as server:
            config = config_file(tmp, server, key_file, hook_url, cfg.interval_s)
            settings = load_settings(config, environ={"HOME": str(tmp)})
            users = [("admin", True), (OWNER, False), (OFFENDER, False)]
            await common.prepare_databases(settings, users, "pw-12345678")
            result.setup_s["sim+db"] = time.monotonic() - t0

            bus = InProcessBus()
            stop = asyncio.Event()
            running = asyncio.create_task(
                run_services(SERVICES, settings, bus_kind="inproc", bus=bus, stop=stop)
            )

            def alive() -> None:
                if running.done():
                    error = None if running.cancelled() else running.exception()
                    raise ServicesStopped(
                        "the services stopped" + (f": {error!r}" if error else " (Ctrl-C?)")
                    )

            unsubscribes: list[Callable[[], Any]] = []
            try:
                t1 = time.monotonic()
                unsubscribes = await subscribe_recorders(bus, rec)
                uuids = await discover_gpus(
                    bus, cfg.hosts * GPUS_PER_HOST, 60 + cfg.hosts * 0.2, alive
                )
                result.setup_s["discover"] = time.monotonic() - t1

                t1 = time.monotonic()
                chosen = rng.sample(sorted(uuids), cfg.processes)
                result.reservations = await reserve(bus, chosen, uuids)
                await until(
                    lambda: rec.reservation_events >= result.reservations,
                    "the reservation.created events",
                    30,
                    alive,
                    0.05,
                )
                await asyncio.sleep(SETTLE_S)
                result.setup_s["reserve"] = time.monotonic() - t1

                plan = sorted((rng.uniform(0, cfg.spread_s), host, index) for host, index in chosen)
                print(
                    f"starting {cfg.processes} processes of {OFFENDER} over {cfg.spread_s:g}s "
                    f"on {cfg.hosts} hosts (poll every {cfg.interval_s:g}s) ...",
                    flush=True,
                )
                lag.start()
                lag.recording = True
                loop_thread = threading.get_native_id()
                cpu0, loop_cpu0 = common.own_cpu_seconds(), common.cpu_seconds(thread=loop_thread)
                w0 = time.monotonic()
                await start_processes(fleet, plan, rec, result, alive)
                last_start = max(rec.started.values())
                await wait_all(rec, last_start + cfg.deadline_s, alive)
                result.window_s = time.monotonic() - w0
                result.cpu_s = common.own_cpu_seconds() - cpu0
                result.loop_cpu_s = common.cpu_seconds(thread=loop_thread) - loop_cpu0
                result.threads = threading.active_count()
                with contextlib.suppress(OSError):
                    result.threads = len(os.listdir("/proc/self/task"))
                lag.recording = False
            finally:
                await lag.stop()
                for unsubscribe in unsubscribes:
                    with contextlib.suppress(Exception):
                        await unsubscribe()
                t1 = time.monotonic()
                stop.set()
                await asyncio.wait_for(running, 60)
                result.stop_s = time.monotonic() - t1
    finally:
        await receiver.cleanup()
        shutil.rmtree(tmp, ignore_errors=True)
    return result


async def wait_all(rec: Recorder, until_wall: float, alive: Callable[[], None]) -> None:
    """Until every process has its violation.opened and webhook, or the wall clock passes."""
    while not rec.complete() and time.time() < until_wall:
        alive()
        await asyncio.sleep(0.05)


# --- report -------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "nan" if value != value else f"{value:,.0f}"  # NaN is the only value != itself


def report(result: Result) -> tuple[common.Latencies, common.Latencies, int]:
    """Print the table; return the opened and webhook figures and the missed count."""
    cfg, rec = result.cfg, result.rec
    opened, opened_missed = rec.latencies(rec.opened, cfg.deadline_s)
    webhook, webhook_missed = rec.latencies(rec.webhook, cfg.deadline_s)
    missed = sum(
        1
        for key, start in rec.started.items()
        if any(
            key not in seen or seen[key] - start > cfg.deadline_s
            for seen in (rec.opened, rec.webhook)
        )
    )
    n = len(rec.started)
    print()
    common.print_machine()
    print(
        f"setup:   {cfg.hosts} hosts x {GPUS_PER_HOST} GPUs = {cfg.hosts * GPUS_PER_HOST} GPUs "
        f"(SimFleet over SSH, churn off), poll interval {cfg.interval_s:g}s; services "
        f"{', '.join(SERVICES)} on the in-process bus, SQLite; {n} processes of "
        f"{OFFENDER} on {n} GPUs reserved by {OWNER} ({result.reservations} reservations), "
        f"started at uniformly random moments over {cfg.spread_s:g}s; seed {cfg.seed}"
        + (" (--quick)" if cfg.quick else "")
    )
    setup = ", ".join(f"{k} {v:.1f}s" for k, v in result.setup_s.items())
    print(f"         set-up: {setup}; stopping the services {result.stop_s:.1f}s")
    print(
        "         violations: steps = " + toml.value(STEPS) + ', handlers = ["webhook"], one json '
        "webhook to a local aiohttp receiver, webhook_min_interval_s = 0 (the default 1/s "
        "per URL would queue the "
        f"{n} alerts behind each other)"
    )
    print()
    target = f"p99 <= {cfg.target_ms:,.0f}"

    def cells(label: str, stat: common.Latencies) -> list[str]:
        ms = (stat.p50, stat.p99, stat.max, stat.mean)
        return [label, f"{stat.count}/{n}", *map(_ms, ms)]

    rows: list[list[str] | str] = []
    for label, stat, miss in (
        ("violation.opened (bus subscriber)", opened, opened_missed),
        ("first webhook delivery (receiver)", webhook, webhook_missed),
    ):
        ok = stat.p99 == stat.p99 and stat.p99 <= cfg.target_ms and miss == 0
        rows.append([*cells(label, stat), target, common.verdict(ok)])
    rows.append("breakdown (same processes):")
    for label, stat in (
        ("  start -> poll that saw it began", rec.between(rec.started, rec.observed_at)),
        ("  that poll began -> opened", rec.between(rec.observed_at, rec.opened)),
        ("  opened -> webhook", rec.between(rec.opened, rec.webhook)),
    ):
        rows.append(cells(label, stat))
    lag = common.Latencies(result.lag.samples_ms)
    ms = (lag.p50, lag.p99, lag.max, lag.mean)
    rows.append(["event-loop lag (50 ms ticker)", str(lag.count), *(f"{x:.1f}" for x in ms)])
    common.print_table(
        [
            "from process start to",
            "seen",
            "p50 ms",
            "p99 ms",
            "max ms",
            "mean ms",
            "target",
            "verdict",
        ],
        rows,
        "<>>>>><<",
    )
    late = common.Latencies(result.late_starts_ms)
    print(
        f"(receive time - start time, time.time(); the poll's start is the `observed_at` of the "
        f"monitor's first processes.observed listing the pid, so 'start -> poll' can be "
        f"slightly negative; missed: nothing within {cfg.deadline_s:g}s = "
        f"{DEADLINE_INTERVALS} intervals + {DEADLINE_EXTRA_S:g}s)"
    )
    print(
        f"counts:  started {n}; violation.opened events {rec.opened_events} "
        f"({rec.opened_unknown} for no process of the bench), missed {opened_missed}; "
        f"webhook deliveries {rec.deliveries} ({rec.deliveries_unknown} unmatched), "
        f"missed {webhook_missed}; missed either: {missed}"
    )
    window = result.window_s or float("nan")
    print(
        f"CPU:     one process, one event loop (simulated SSH hosts, monitor, reservations, "
        f"violations, receiver, bench); over the {window:.0f}s window: "
        f"{result.cpu_s / window * 100:.0f}% of one core in all, event loop thread "
        f"{result.loop_cpu_s / window * 100:.0f}% ({result.threads} threads: SQLite and "
        f"resolver workers); process starts were late by p99 {late.p99:.1f} ms, "
        f"max {late.max:.1f} ms"
    )
    return opened, webhook, missed


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "10 hosts, 20 processes over 10 s")
    ap.add_argument("--hosts", type=int, help="simulated hosts of 8 GPUs (100; --quick: 10)")
    ap.add_argument("--processes", type=int, help="offending processes (200; --quick: 20)")
    ap.add_argument("--spread", type=float, help="seconds they start over (60; --quick: 10)")
    ap.add_argument("--interval", type=float, default=2.0, help="monitor interval_s (2)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (1)")
    return ap.parse_args(argv)


def make_config(args: argparse.Namespace) -> Config:
    cfg = Config(
        hosts=args.hosts or (10 if args.quick else 100),
        processes=args.processes or (20 if args.quick else 200),
        spread_s=args.spread if args.spread is not None else (10.0 if args.quick else 60.0),
        interval_s=args.interval,
        seed=args.seed,
        quick=args.quick,
    )
    if not 0 < cfg.processes <= cfg.hosts * GPUS_PER_HOST:
        raise SystemExit(f"--processes must be 1..{cfg.hosts * GPUS_PER_HOST} (hosts x 8)")
    if cfg.interval_s <= 0 or cfg.spread_s < 0:
        raise SystemExit("--interval must be positive and --spread not negative")
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = make_config(parse_args(sys.argv[1:] if argv is None else argv))
    result = common.run_async(run(cfg), "temporary files removed", ServicesStopped)
    opened, webhook, missed = report(result)
    common.print_result(
        interval_ms=f"{cfg.interval_s * 1000:.0f}",
        opened_p99_ms=f"{opened.p99:.0f}",
        webhook_p99_ms=f"{webhook.p99:.0f}",
        missed=missed,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
