"""The printed report of bench/api_load.py: the table per route and the verdicts (`report`), the
create-only phase (`report_creates`), the server's profile by package (`print_profile`) and the
last line, `RESULT key=value ...` (`print_result_line`).
"""

from __future__ import annotations

import io
import pstats
import re
from collections import Counter
from pathlib import Path

import _common as common
import aiohttp
from _api_load_figures import (
    CLIENTS,
    GPUS_PER_HOST,
    HOSTS,
    LABELS,
    READS,
    ROUTES,
    TARGET_CREATE_P99_MS,
    TARGET_CREATE_RPS,
    TARGET_READ_P99_MS,
    TARGET_RPS,
    USERS,
    Result,
    RouteStats,
)

# --- report -------------------------------------------------------------------------------------


def _num(value: float, digits: int = 1) -> str:
    return "nan" if value != value else f"{value:.{digits}f}"  # NaN is the only value != itself


def target(route: str) -> float:
    return TARGET_CREATE_P99_MS if route == "create" else TARGET_READ_P99_MS


def _statuses(stats: RouteStats) -> str:
    other = stats.other()
    parts = [f"{status}: {n}" for status, n in other.items()]
    if stats.failures:
        parts.append(f"no answer: {stats.failures}")
    return ", ".join(parts) or "-"


def report(result: Result) -> None:
    cfg = result.cfg
    print()
    common.print_machine(
        f"aiohttp {aiohttp.__version__}", sharing="bench, server and simulator share it"
    )
    if not cfg.url:
        setup = ", ".join(f"{k} {v:.1f}s" for k, v in result.setup_s.items())
        print(
            f"setup:   `warden run all` ({result.server}), embedded storage, against `warden sim` "
            f"{HOSTS} hosts x {GPUS_PER_HOST} GPUs (no churn, monitor every 5 s); "
            f"{len(USERS)} users + admin"
        )
        how = "by POST as admin" if cfg.seed_via == "api" else "into SQLite, server stopped"
        print(
            f"         seeded {result.seeded:,} reservations ({how}; {result.seed_conflicts} "
            f"conflicts planned again, {result.seed_given_up} not made); set-up: {setup}"
        )
    else:
        print(f"server:  {result.server}")
    mix = ", ".join(f"{LABELS[r].split(' (')[0]} {p:g}%" for r, p in cfg.mix if p)
    print(
        f"load:    {CLIENTS} closed-loop clients as {len(USERS)} users, one aiohttp session; "
        f"{cfg.warmup_s:g}s warm-up, {result.window_s:.1f}s recorded; mix: {mix}; "
        f"GET /gpus before the load: {result.gpus_route}; seed {cfg.seed}"
        + (" (--quick)" if cfg.quick else "")
    )
    print()
    window = result.window_s or float("nan")

    def figures(label: str, s: RouteStats) -> list[str]:
        ms = (s.p50, s.p99, s.max)
        not_modified = str(s.statuses[304]) if s.count else ""
        return [label, str(s.count), f"{s.count / window:.0f}", not_modified, *map(_num, ms)]

    rows = []
    for route in ROUTES:
        s = result.routes.get(route, RouteStats())
        size = s.bytes_in / s.count / 1024 if s.count else float("nan")
        ok = s.p99 < target(route)
        rows.append(
            [
                *figures(LABELS[route], s),
                _num(size),
                f"p99 < {target(route):g}",
                common.verdict(ok, s.p99),
                _statuses(s),
            ]
        )
    reads = result.merged(READS) if result.routes else RouteStats()
    ok = reads.p99 < TARGET_READ_P99_MS
    rows.append(
        [
            *figures("all reads", reads),
            "",
            f"p99 < {TARGET_READ_P99_MS:g}",
            common.verdict(ok, reads.p99),
        ]
    )
    every = result.merged(ROUTES) if result.routes else RouteStats()
    ok = result.rps >= TARGET_RPS
    rows.append(
        [
            *figures("all", every),
            "",
            f">= {TARGET_RPS:,.0f}/s",
            common.verdict(ok, result.rps),
            f"server errors: {result.server_errors}",
        ]
    )
    common.print_table(
        [
            "route",
            "count",
            "req/s",
            "304s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "KiB/ans",
            "target",
            "verdict",
            "non-2xx",
        ],
        rows,
        "<>>>>>>><<<",
    )
    print(
        "(latency: from sending to the end of the body, time.perf_counter; a 409/403 on a "
        "create is an answer; server errors: 5xx and requests with no answer)"
    )
    cpu = result.cpu

    def share(seconds: float) -> str:
        return _num(seconds / window * 100, 0) + "%"

    print(
        f"CPU over the window, % of one core: bench (load generator) {share(cpu.bench)}, "
        f"server {share(cpu.server)}, simulator {share(cpu.sim)}, other processes "
        f"{share(cpu.others)}; machine busy {share(cpu.machine)} of {common.usable_cpus() * 100}%"
    )
    print(
        "(304s: answers Not Modified to the clients' If-None-Match"
        + (", off: --no-etag)" if not cfg.etag else ")")
    )
    if result.creates:
        report_creates(result)


def report_creates(result: Result) -> None:
    print()
    print(
        "create-only phase: POST /reservations, none conflicting, "
        f"{result.cfg.create_duration_s:g}s per client count, keep-alive"
    )
    rows = []
    for clients, (stats, window, cpu) in result.creates.items():
        rps = stats.count / window if window else float("nan")
        errors = stats.failures + sum(n for status, n in stats.statuses.items() if status != 201)
        server_cpu = cpu.server / stats.count * 1e3 if stats.count else float("nan")
        rows.append(
            [
                str(clients),
                str(stats.count),
                f"{rps:.0f}",
                _num(stats.p50),
                _num(stats.p99),
                _num(stats.max),
                str(errors),
                _num(server_cpu, 2),
                _num(cpu.others / window * 100, 0) + "%",
            ]
        )
    common.print_table(
        [
            "clients",
            "count",
            "req/s",
            "p50 ms",
            "p99 ms",
            "max ms",
            "errors",
            "server CPU ms/create",
            "other processes",
        ],
        rows,
        ">>>>>>>>>",
    )
    rps, p99 = result.create_figures(64)
    met = rps >= TARGET_CREATE_RPS and p99 < TARGET_CREATE_P99_MS
    print(
        f"(errors: 5xx, no answer, or any answer but 201; target at 64 clients: >= "
        f"{TARGET_CREATE_RPS:,.0f}/s and p99 < {TARGET_CREATE_P99_MS:g} ms: "
        f"{common.verdict(met, rps)}; other processes: CPU % of one core used by the rest "
        "of the machine)"
    )


def _package(filename: str, function: str) -> str:
    """What a profiled function belongs to: services/<service>, a package, or a builtin."""
    if filename == "~":
        found = re.search(r"method '(\w+)' of '([\w.]+)", function)
        if found:
            return f"builtin {found.group(2)}.{found.group(1)}"
        found = re.search(r"built-in method ([\w.]+)", function)
        return f"builtin {found.group(1)}" if found else "builtin other"
    found = re.search(r"/services/(\w+)/", filename)
    if found:
        return f"services/{found.group(1)}"
    found = re.search(r"site-packages/(\w+)", filename) or re.search(
        r"python3\.\d+/(\w+)", filename
    )
    return found.group(1) if found else filename


def print_profile(path: Path, top: int = 25) -> None:
    """The server's top functions of services/ and aiohttp by cumulative time, and the event-loop
    thread's own time (tottime) by package."""
    if not path.exists():
        print(f"(no profile at {path}: the server did not exit cleanly)")
        return
    out = io.StringIO()
    stats = pstats.Stats(str(path), stream=out).sort_stats("cumulative")
    stats.print_stats(r"(/services/|/aiohttp/)", top)
    print(f"--- cProfile of the server, {path} (top {top} of services/ and aiohttp) ---")
    text = out.getvalue().split("\n\n", 1)[-1].rstrip()
    print(re.sub(r"\S*/site-packages/", "", text.replace(str(common.REPO) + "/", "")))
    own: Counter[str] = Counter()
    for (filename, _line, function), figures in stats.stats.items():
        own[_package(filename, function)] += figures[2]
    total = sum(own.values()) or float("nan")
    print(f"own time of the profiled (event-loop) thread by package, {total:.1f}s in all:")
    for name, seconds in own.most_common(15):
        print(f"  {seconds:6.2f}s {seconds / total * 100:5.1f}%  {name}")
    print("--- end of profile (figures measured under the profiler are inflated) ---")


def print_result_line(result: Result) -> None:
    reads = result.merged(READS) if result.routes else RouteStats()
    create = result.routes.get("create", RouteStats())
    common.print_result(
        rps=_num(result.rps, 0),
        read_p99_ms=_num(reads.p99),
        create_p99_ms=_num(create.p99),
        server_errors=result.server_errors,
        create_rps_c64=_num(result.create_figures(64)[0], 0),
        create_p99_ms_c64=_num(result.create_figures(64)[1]),
    )
