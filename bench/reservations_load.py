"""Latency of the reservations service under load, through RPC, on SQLite and on PostgreSQL.

Usage::

    .venv/bin/python bench/reservations_load.py [--quick] [--backend sqlite|postgresql|both]

Set-up, for each backend in turn:

- A fresh database: a SQLite file in a temporary folder, or a database
  `warden_bench_<random>` created on PostgreSQL (`--pg-url`, env WARDEN_BENCH_PG_URL, default
  postgresql://postgres@127.0.0.1:5432/postgres; dropped WITH (FORCE) at the end). When
  PostgreSQL cannot be reached that is said in one line and its figures are `nan`.
  Migrated with `services.shared.storage.db.upgrade(engine, "reservations")`.
- 50 users (user00..user49) and an admin, made with `accounts.create_user` (argon2 made cheap
  for the bench), 200 GPUs (25 hosts x 8; half A100, half H100) and 20,000 reservations from
  4 weeks ago to 8 weeks ahead (mostly 1 GPU, some 2/4/8 on one host, 1-12 h, never
  overlapping on a GPU), bulk-inserted straight into the tables (no RPC).
- The service started as `warden run` starts it (`services.reservations.service.start` on an
  in-process bus, then `runtime.settle_garbage_collector()`); every figure below is one
  `bus.call("reservations", ...)` (JSON round trip of arguments and results included), timed
  with time.perf_counter after a few warm-up calls.

Measurements:

1. create: 32 clients in a closed loop, `create_reservation` of 1-2 GPUs on one host, 1-4 h,
   1-8 weeks ahead (1,600 in all; --quick 160). A ReservationConflict is a valid answer.
   The same by 64 clients, and by one client (200; --quick 20), as a side figure: what a
   create costs without waiting for the others. Each create row also gives the process CPU
   time (service and bench together, time.process_time) per create.
2. calendar: 64 GPUs (8 random hosts) x 7 days within the next 4 weeks (300; --quick 30).
3. overview: all 200 GPUs x 4 weeks from today 00:00 UTC, 30-min slots, `format=compact` as
   the web UI asks for it (60; --quick 6); the same in the full format (an object per run) as
   a side figure.
4. earliest-slot: `find_slot` of 8 GPUs on one host for 4 h, from a time within 2 weeks
   (200; --quick 20).
5. concurrent same slot: 20 users create the same 2 GPUs for the same 2 hours at once; exactly
   one must succeed.

`--profile OPERATION` runs that measurement under cProfile and prints the top entries from
services/ by cumulative time. The read measurements' notes give the CPU time per call
(`time.process_time`: this process, i.e. bench, bus and service with its SQLite thread; not
PostgreSQL's server), less noisy than latency on a shared machine. The last line is
machine-readable:
`RESULT create_p99_ms=<n> calendar_p99_ms=<n> overview_p99_ms=<n> earliest_p99_ms=<n>
create_rps=<n> create_cpu_ms=<n> create_p99_ms_c64=<n> create_rps_c64=<n> pg_create_p99_ms=<n>
... concurrent_same_slot_successes=<n>` (SQLite without prefix; create_rps and create_cpu_ms
are of the 32-client phase).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import functools
import io
import os
import pstats
import random
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import _common as common
import asyncpg
import sqlalchemy
from _reservations_load_calls import (
    WARMUP_CALLS,
    Call,
    Calls,
    calendar_args,
    earliest_args,
    full_overview_args,
    gpus_found,
    measure_creates,
    measure_same_slot,
    measure_sequential,
    overview_args,
    overview_runs,
)
from _reservations_load_seed import (
    DEFAULT_PG_URL,
    GPUS_PER_HOST,
    HOSTS,
    USERS,
    hide_password,
    pg_admin_url,
    postgres_database,
    seed,
)

from services.reservations.service import start as start_reservations
from services.shared import event_loop
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.runtime import ServiceContext, settle_garbage_collector
from services.shared.storage import db

CREATE_CLIENTS = 32
CREATE_CLIENTS_WIDE = 64
CALL_TIMEOUT_S = 30.0

OPERATIONS = (
    "create",
    "create_c64",
    "create_serial",
    "calendar",
    "overview",
    "overview_full",
    "earliest",
    "same_slot",
)
TARGETS_MS = {"create": 25.0, "calendar": 20.0, "overview": 100.0, "earliest": 50.0}
LABELS = {
    "create": "create",
    "create_c64": "create, 64 clients",
    "create_serial": "create, 1 client",
    "calendar": "calendar",
    "overview": "overview",
    "overview_full": "overview, full format",
    "earliest": "earliest-slot",
    "same_slot": "concurrent same slot",
}

# --- figures ------------------------------------------------------------------------------------


@dataclass
class BackendResult:
    backend: str  # "sqlite" | "postgresql"
    where: str = ""
    skipped: str = ""  # why it did not run (PostgreSQL unreachable)
    server: str = ""
    setup_s: dict[str, float] = field(default_factory=dict)
    seeded: dict[str, int] = field(default_factory=dict)
    ops: dict[str, Calls] = field(default_factory=dict)
    same_slot_successes: int | None = None

    def p99(self, operation: str) -> float:
        found = self.ops.get(operation)
        return found.p99 if found else float("nan")


@dataclass
class Config:
    creates: int
    serial_creates: int
    calendar_calls: int
    overview_calls: int
    earliest_calls: int
    seed_reservations: int
    seed: int
    profile: str | None


# --- the service --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def running_service(url: str, data_dir: Path) -> AsyncIterator[Call]:
    """The reservations service on an in-process bus; yields a function that calls it."""
    settings = load_settings(
        None,
        environ={
            "WARDEN_STORAGE_DATABASE_URL": url,
            "WARDEN_STORAGE_DATA_DIR": str(data_dir),
            "WARDEN_AUTH_JWT_SECRET": "x" * 48,
            "HOME": str(data_dir),
        },
    )
    bus = InProcessBus()
    await bus.start()
    try:
        teardown = await start_reservations(ServiceContext("reservations", settings, bus))
        settle_garbage_collector()  # as `warden run` does once its services have started
        try:

            async def call(method: str, args: dict[str, Any]) -> Any:
                return await bus.call("reservations", method, args, timeout=CALL_TIMEOUT_S)

            yield call
        finally:
            await teardown()
    finally:
        await bus.close()


@contextlib.contextmanager
def profiled(enabled: bool, label: str) -> Iterator[None]:
    """cProfile around a measurement; prints the top functions of services/ by cumulative time."""
    if not enabled:
        yield
        return
    profile = cProfile.Profile()
    profile.enable()
    try:
        yield
    finally:
        profile.disable()
        out = io.StringIO()
        stats = pstats.Stats(profile, stream=out).sort_stats("cumulative")
        stats.print_stats(r"/services/", 30)
        print(f"--- cProfile of {label} (top 30 of services/, by cumulative time) ---")
        print(out.getvalue().split("\n\n", 1)[-1].rstrip())
        print("--- end of profile (figures measured under the profiler are inflated) ---")


async def measure_all(call: Call, cfg: Config, now_ms: int, result: BackendResult) -> None:
    def step(operation: str) -> contextlib.AbstractContextManager[None]:
        print(f"  {LABELS[operation]} ...", flush=True)
        return profiled(cfg.profile == operation, f"{LABELS[operation]} on {result.backend}")

    with step("create"):
        result.ops["create"] = await measure_creates(
            call, cfg.creates, CREATE_CLIENTS, cfg.seed + 1, now_ms
        )
    with step("create_c64"):
        result.ops["create_c64"] = await measure_creates(
            call, cfg.creates, CREATE_CLIENTS_WIDE, cfg.seed + 4, now_ms
        )
    with step("create_serial"):  # the same without queueing: what one create costs
        result.ops["create_serial"] = await measure_creates(
            call, cfg.serial_creates, 1, cfg.seed + 3, now_ms
        )
    rng = random.Random(cfg.seed + 2)
    sequential = (  # operation, method, its arguments, calls, what an answer holds
        ("calendar", "calendar", calendar_args, cfg.calendar_calls, ("reservations", len)),
        ("overview", "overview", overview_args, cfg.overview_calls, ("runs", overview_runs)),
        (
            "overview_full",
            "overview",
            full_overview_args,
            cfg.overview_calls,
            ("runs", overview_runs),
        ),
        ("earliest", "find_slot", earliest_args, cfg.earliest_calls, ("GPUs", gpus_found)),
    )
    for operation, method, make, calls, size in sequential:
        with step(operation):
            result.ops[operation] = await measure_sequential(
                call, method, functools.partial(make, rng, now_ms), calls, size
            )
    with step("same_slot"):
        result.ops["same_slot"], result.same_slot_successes = await measure_same_slot(call, now_ms)


# --- one backend --------------------------------------------------------------------------------


async def run_on(url: str, tmp: Path, cfg: Config, result: BackendResult) -> None:
    """Migrate, seed, start the service and measure, on the database at `url`."""
    now_ms = int(time.time() * 1000)
    engine = db.create_engine(url)
    try:
        t0 = time.perf_counter()
        await db.upgrade(engine, "reservations")
        result.setup_s["migrate"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        result.seeded = await seed(engine, cfg.seed_reservations, cfg.seed, now_ms)
        result.setup_s["seed"] = time.perf_counter() - t0
        print(
            f"  seeded {result.seeded['reservations']:,} reservations "
            f"({result.seeded['gpu_slots']:,} GPU slots) in {result.setup_s['seed']:.1f}s",
            flush=True,
        )
        t0 = time.perf_counter()
        async with running_service(url, tmp) as call:
            result.setup_s["start"] = time.perf_counter() - t0
            await measure_all(call, cfg, now_ms, result)
    finally:
        await engine.dispose()


async def run_sqlite(cfg: Config) -> BackendResult:
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-reservations-"))
    path = tmp / "reservations.db"
    result = BackendResult("sqlite", where=str(path), server=f"SQLite {sqlite3.sqlite_version}")
    print(f"sqlite: {path}", flush=True)
    try:
        await run_on(f"sqlite+aiosqlite:///{path}", tmp, cfg, result)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


async def run_postgresql(cfg: Config, admin_url: str) -> BackendResult:
    result = BackendResult("postgresql")
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-reservations-pg-"))
    try:
        async with postgres_database(admin_url) as (url, version):
            result.where = hide_password(url)
            result.server = f"PostgreSQL {version}"
            print(f"postgresql: {result.where}", flush=True)
            await run_on(url, tmp, cfg, result)
    except (OSError, asyncpg.PostgresError, asyncpg.InterfaceError, TimeoutError) as err:
        if result.server:  # it was reachable: this is no connection problem, but a failure
            raise
        result.skipped = f"{err.__class__.__name__}: {err}"
        print(
            f"postgresql: UNREACHABLE at {hide_password(admin_url)} ({result.skipped}); "
            "its figures are reported as nan",
            flush=True,
        )
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return result


async def run_all(args: argparse.Namespace, cfg: Config) -> list[BackendResult]:
    results = []
    if args.backend in ("sqlite", "both"):
        results.append(await run_sqlite(cfg))
    if args.backend in ("postgresql", "both"):
        results.append(await run_postgresql(cfg, pg_admin_url(args)))
    return results


# --- report -------------------------------------------------------------------------------------


def _num(value: float) -> str:
    return "nan" if value != value else f"{value:.1f}"  # NaN is the only value != itself


def target(operation: str) -> str:
    if operation == "same_slot":
        return "successes = 1"
    return f"p99 < {TARGETS_MS[operation]:g}" if operation in TARGETS_MS else "-"


def judge(result: BackendResult, operation: str) -> str:
    if operation == "same_slot":
        if result.same_slot_successes is None:
            return "n/a"
        return common.verdict(result.same_slot_successes == 1)
    p99 = result.p99(operation)
    if operation not in TARGETS_MS:
        return "-"
    return common.verdict(p99 < TARGETS_MS[operation], p99)


def report(results: list[BackendResult], cfg: Config, args: argparse.Namespace) -> None:
    print()
    common.print_machine(
        f"SQLAlchemy {sqlalchemy.__version__}",
        f"asyncpg {asyncpg.__version__}",
        sharing="bench, service and PostgreSQL share it",
    )
    for r in results:
        if r.skipped:
            print(f"{r.backend + ':':<11} not run ({r.skipped})")
            continue
        setup = ", ".join(f"{k} {v:.1f}s" for k, v in r.setup_s.items())
        print(f"{r.backend + ':':<11} {r.server}, {r.where}; set-up: {setup}")
    print(
        f"data:    {len(USERS)} users + admin, {len(HOSTS)} hosts x {GPUS_PER_HOST} GPUs, "
        f"{cfg.seed_reservations:,} reservations (-4..+8 weeks); in-process bus, "
        f"{WARMUP_CALLS} warm-up calls per operation; seed {cfg.seed}; event loop "
        f"{event_loop.loop_name()} (as `warden run`)" + (" (--quick)" if args.quick else "")
    )
    print()
    rows = []
    for r in results:
        for operation in OPERATIONS:
            figures = r.ops.get(operation, Calls())
            rows.append(
                [
                    r.backend,
                    LABELS[operation],
                    str(figures.count),
                    *(_num(ms) for ms in (figures.p50, figures.p99, figures.max)),
                    target(operation),
                    judge(r, operation),
                    "not run" if r.skipped else figures.note,
                ]
            )
    common.print_table(
        [
            "backend",
            "operation",
            "calls",
            "p50 ms",
            "p99 ms",
            "max ms",
            "target",
            "verdict",
            "note",
        ],
        rows,
        "<<>>>><<<",
    )
    print(
        "(latency: bus.call to answer, JSON round trips included; conflicts and 'none found' "
        "are answers and counted; errors are not)"
    )


def same_slot_figure(results: list[BackendResult]) -> str:
    """The worse of the backends' figures (the one farther from 1)."""
    found = [r.same_slot_successes for r in results if r.same_slot_successes is not None]
    return "nan" if not found else str(max(found, key=lambda n: abs(n - 1)))


def result_figures(results: list[BackendResult]) -> dict[str, str]:
    by_backend = {r.backend: r for r in results}
    figures = {}
    for prefix, backend in (("", "sqlite"), ("pg_", "postgresql")):
        r = by_backend.get(backend, BackendResult(backend))
        for operation in ("create", "calendar", "overview", "earliest"):
            figures[f"{prefix}{operation}_p99_ms"] = _num(r.p99(operation))
        created = r.ops.get("create")
        figures[f"{prefix}create_rps"] = _num(
            created.count / created.wall_s if created and created.wall_s else float("nan")
        )
        figures[f"{prefix}create_cpu_ms"] = _num(created.cpu_ms if created else float("nan"))
        wide = r.ops.get("create_c64")
        figures[f"{prefix}create_p99_ms_c64"] = _num(r.p99("create_c64"))
        figures[f"{prefix}create_rps_c64"] = _num(
            wide.count / wide.wall_s if wide and wide.wall_s else float("nan")
        )
    figures["concurrent_same_slot_successes"] = same_slot_figure(results)
    return figures


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "a tenth of the calls")
    ap.add_argument("--backend", choices=("sqlite", "postgresql", "both"), default="both")
    ap.add_argument(
        "--pg-url",
        help="PostgreSQL server to make a database on (default: env WARDEN_BENCH_PG_URL, "
        f"else {DEFAULT_PG_URL})",
    )
    ap.add_argument(
        "--no-uvloop",
        action="store_true",
        help="asyncio's own event loop, not uvloop (as `warden run` with WARDEN_UVLOOP=0)",
    )
    ap.add_argument("--reservations", type=int, default=20_000, help="seeded reservations (20,000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (1)")
    ap.add_argument(
        "--profile",
        choices=OPERATIONS,
        help="run this measurement under cProfile; print the top services/ functions",
    )
    return ap.parse_args(argv)


def make_config(args: argparse.Namespace) -> Config:
    scale = 10 if args.quick else 1
    return Config(
        creates=1_600 // scale,
        serial_creates=200 // scale,
        calendar_calls=300 // scale,
        overview_calls=60 // scale,
        earliest_calls=200 // scale,
        seed_reservations=args.reservations,
        seed=args.seed,
        profile=args.profile,
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    cfg = make_config(args)
    cleaned_up = "service stopped, temporary files and databases removed"
    if args.no_uvloop:
        os.environ["WARDEN_UVLOOP"] = "0"
    # The service runs in this process: on the loop `warden run` would run it on.
    results = common.run_async(
        run_all(args, cfg), cleaned_up, loop_factory=event_loop.loop_factory()
    )
    report(results, cfg, args)
    common.print_result(**result_figures(results))
    return 0


if __name__ == "__main__":
    sys.exit(main())
