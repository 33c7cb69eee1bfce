"""Load on the REST API: requests/s and latency per route of `warden run all` under 64 clients.

Usage::

    .venv/bin/python bench/api_load.py [--quick] [--seed-via db|api] [--mix ROUTE=PCT,...]
        [--serve] [--server-profile PATH] [--url URL [--server-pid PID]] [--no-etag]
        [--create-clients 1,8,64] [--create-duration S]

Set-up (each part its own OS process, on this machine, in a temporary folder removed at the end):

- `warden sim --hosts 50 --gpus-per-host 8 --no-churn --seed 1 --control-port 0
  --write-config DIR/sim/hosts.toml`: 50 simulated hosts x 8 GPUs = 400 GPUs served over real
  SSH (no background jobs: nothing for the violations service to act on, so the figures do
  not depend on chance).
- warden.toml: `[log] level = "warning"`, `[storage] data_dir` (embedded: SQLite and the
  embedded TSDB), a random `[auth] jwt_secret`, `[gateway] port` (a free one) with
  `login_failures_per_ip = 1000`, `[ssh] known_hosts` (the sim's), `[monitor] local_nvml =
  "off"` and the default `interval_s` (5 s: the monitor polls the 50 hosts all along, as it would in
  production), then the sim's `[[hosts]]`. Every database is migrated with
  `services.shared.storage.db.upgrade` and the accounts user00..user49 and admin are made in the
  reservations database by `accounts.create_user` (argon2 made cheap here, so the 51 logins
  through the server are cheap too). The default access rule lets every user book every GPU.
- `python -m services.cli run all --config warden.toml`: every service and the gateway in one
  process on the in-process bus. The bench waits for GET /api/v1/health = 200, for the 400
  GPUs in the reservations service (GET /api/v1/reservations/overview without `gpus` lists
  every GPU it knows) and in GET /api/v1/gpus.
- Seeding: 10,000 reservations (--quick: 1,000) of the 50 users (created by admin), each on 1,
  2, 4 or 8 GPUs of one host (weights 85/8/5/2), 1-12 h, starting at a half hour from the next
  full hour to 8 weeks ahead, planned so that none overlaps another. By default
  (`--seed-via db`) the server is stopped once it knows the GPUs, the plan is inserted
  straight into the tables `reservations` and `reservations_gpu_slots` (as
  bench/reservations_load.py does; about a second) and the server is started again, and the
  bench waits for it as above. `--seed-via api` creates them instead by
  `POST /api/v1/reservations` as admin with `owner`, 32 requests at a time (a 409 is planned
  again elsewhere): about 70/s on 2 cores, so over two minutes for 10,000, which is why it is
  not the default. The time either takes is reported.

Measurement: 64 clients, each a coroutine in a closed loop (one request after the other),
share one aiohttp ClientSession (keep-alive, up to 128 connections); client i is signed in as
user(i mod 50) (`POST /api/v1/session`, one login per user). Each request is drawn at random:

- 35 % `GET /api/v1/gpus`;
- 35 % `GET /api/v1/reservations?start&end&gpus&limit=500`: one host's 8 GPUs (by uuid) x
  7 days from a random day 00:00 UTC within the next 7 weeks (the seeded period); each client
  polls its own 4 such calendar views (drawn once from 4,096), as a calendar page left open;
- 20 % `GET /api/v1/reservations/overview?start&end&slot_minutes=60&gpus`: one host's 8 GPUs
  x 14 days from a random day 00:00 UTC within the next 6 weeks;
- 10 % `POST /api/v1/reservations` as the client's user: 1-2 GPUs of a random host, 1-4 h,
  starting at a half hour 1-8 weeks ahead. 201, 409 (conflict) and 403 (not allowed) are
  valid answers.

The clients behave like pollers: for `GET /gpus` and the calendar reads each sends
`If-None-Match` with the ETag of its last answer to that URL, and a 304 Not Modified counts
as a success (its own column in the table; `--no-etag`: plain GETs, as before).

After a warm-up (3 s; --quick: 1 s) of the same load that is not recorded, every request
started during the next 30 s (--quick: 5 s) is timed with time.perf_counter from before
sending to the end of reading the body; the clients then finish the request in flight.
requests/s = recorded requests / (the end of the last one - the start of the window). Any
5xx, and any request with no answer (connection error, 30 s timeout), counts in
`server_errors`; other non-2xx answers are listed per route (a 4xx other than 409/403 on a
create would be a bug of the bench). CPU: the bench's own (`resource.getrusage`), the server's
and the simulator's (utime + stime of /proc/PID/stat) over the window, in % of one core.
Targets (issue, on 2 cores): >= 1,500 requests/s overall, p99 < 50 ms for reads, < 100 ms for
creates.

Then a create-only phase: `POST /api/v1/reservations` alone at 1, 8 and 64 clients
(`--create-clients`), each count for 10 s (--quick: 2 s; `--create-duration`) after a 1 s
warm-up, keep-alive on the same session, client i as user(i mod 50). The creates are planned
so that none conflicts with any other or with the seeded or mixed-phase reservations: the
n-th create of the phase takes GPU n mod 400 (by uuid) for the hour n div 400, counted from
10 weeks ahead. A row per client count: req/s, p50, p99, errors (5xx, no answer, and any
answer but 201: a refusal here would be a bug). Target at 64 clients: >= 1,500/s, p99 < 100 ms.

The last line is machine-readable: `RESULT rps=<n> read_p99_ms=<n> create_p99_ms=<n>
server_errors=<n> create_rps_c64=<n> create_p99_ms_c64=<n>` (read: the three GET routes of
the mix together; server_errors: of both phases; the last two: the create-only phase at 64
clients).

`--mix gpus=1` (say) loads one route alone: what it costs without the others. `--url URL`
runs only the load against a server that is already running (no set-up, no seeding; its CPU is
measured with `--server-pid PID`): its accounts must be user00..user49 with the bench's
password (`--password`), as a server left running by `--serve` has. `--serve` does the set-up
and seeding, prints the URL and waits for Ctrl-C. `--server-profile PATH` (re)starts the
server after seeding as `python -m cProfile -o PATH -m services.cli run all ...` and, at the
end, prints its top functions from services/ and aiohttp by cumulative time (for coroutines
cProfile counts every resumption, so theirs add up to more than the wall time) and the
event-loop thread's own time by package: figures measured under the profiler are inflated.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import io
import json
import pstats
import random
import re
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import _common as common
import aiohttp
from sqlalchemy import func, insert, select
from yarl import URL

from services.reservations.store import to_ms
from services.reservations.tables import gpu_slots, reservations
from services.shared.config import load_settings
from services.shared.storage import db

API = "/api/v1"
HOSTS = 50
GPUS_PER_HOST = 8
SIM_SEED = 1
USERS = [f"user{i:02d}" for i in range(50)]
ADMIN = "admin"
PASSWORD = "bench-password-1"

CLIENTS = 64
SEED_CLIENTS = 32
MIX = (("gpus", 35.0), ("range", 35.0), ("overview", 20.0), ("create", 10.0))  # route, percent
ROUTES = tuple(route for route, _ in MIX)
READS = ("gpus", "range", "overview")
LABELS = {
    "gpus": "GET /gpus",
    "range": "GET /reservations (8 GPUs x 7 d)",
    "overview": "GET /reservations/overview (8 x 14 d)",
    "create": "POST /reservations",
}
# Answers that are not a 2xx but are valid: refused creates, and 304 to a poller.
VALID_REFUSALS = {"create": (403, 409), "gpus": (304,), "range": (304,)}
TARGET_RPS = 1_500.0
TARGET_READ_P99_MS = 50.0
TARGET_CREATE_P99_MS = 100.0

HALF_HOUR = timedelta(minutes=30)
HOUR = timedelta(hours=1)
DAY = timedelta(days=1)
WEEK = timedelta(days=7)
SEED_AHEAD = 8 * WEEK
SEED_SIZES = ((1, 85), (2, 8), (4, 5), (8, 2))  # GPUs per seeded reservation, weight
SEED_TITLES = ("training", "fine-tune", "eval", "sweep", "debug", "inference test")
SEED_ATTEMPTS = 5  # plans of one seeded reservation before it is given up
CHUNK = 2_000  # rows per executemany
URLS_PER_ROUTE = 4_096  # range and overview URLs drawn once, then picked at random
VIEWS_PER_CLIENT = 4  # calendar views each client polls (conditional GETs)
CONDITIONAL = ("gpus", "range")  # routes the clients poll with If-None-Match
CREATE_CLIENTS = (1, 8, 64)
CREATE_AHEAD = 10 * WEEK  # the create-only phase books from here on (after seed and mix)
TARGET_CREATE_RPS = 1_500.0

REQUEST_TIMEOUT_S = 30.0
START_DEADLINE_S = 120.0
STOP_WAIT_S = 60.0


# --- figures ------------------------------------------------------------------------------------


@dataclass
class RouteStats(common.Latencies):
    """The recorded requests of one route."""

    statuses: Counter[int] = field(default_factory=Counter)
    failures: int = 0  # no answer at all (connection error, timeout)
    bytes_in: int = 0

    def record(self, started: float, status: int, size: int) -> None:
        self.add(started)
        self.statuses[status] += 1
        self.bytes_in += size

    @property
    def server_errors(self) -> int:
        return self.failures + sum(n for s, n in self.statuses.items() if s >= 500)

    def other(self) -> dict[int, int]:
        """Non-2xx answers by status (304 has its own column)."""
        return {s: n for s, n in sorted(self.statuses.items()) if not 200 <= s < 300 and s != 304}


@dataclass
class Cpu:
    """CPU seconds (user + system) of the bench, the server and the simulator, and of the whole
    machine (everything but idle and iowait in /proc/stat)."""

    bench: float = float("nan")
    server: float = float("nan")
    sim: float = float("nan")
    machine: float = field(default_factory=lambda: machine_cpu_s())

    def minus(self, other: Cpu) -> Cpu:
        return Cpu(
            self.bench - other.bench,
            self.server - other.server,
            self.sim - other.sim,
            self.machine - other.machine,
        )

    @property
    def others(self) -> float:
        """What other processes of the machine used (nan when the server's is not known)."""
        return self.machine - self.bench - self.server - (0.0 if self.sim != self.sim else self.sim)


@dataclass
class Config:
    quick: bool
    duration_s: float
    warmup_s: float
    reservations: int
    seed: int
    url: str | None
    serve: bool
    server_profile: Path | None
    password: str
    seed_via: str  # "db" | "api"
    mix: tuple[tuple[str, float], ...]
    server_pid: int | None
    etag: bool = True
    create_clients: tuple[int, ...] = CREATE_CLIENTS
    create_duration_s: float = 10.0


@dataclass
class Result:
    cfg: Config
    routes: dict[str, RouteStats]
    window_s: float = 0.0
    # The create-only phase: clients -> (its creates, its window in seconds, its CPU)
    creates: dict[int, tuple[RouteStats, float, Cpu]] = field(default_factory=dict)
    cpu: Cpu = field(default_factory=Cpu)
    setup_s: dict[str, float] = field(default_factory=dict)
    seeded: int = 0
    seed_conflicts: int = 0
    seed_given_up: int = 0
    gpus_route: str = ""  # how GET /gpus answered before the load (a 404: not there yet)
    server: str = ""

    @property
    def total(self) -> int:
        return sum(r.count for r in self.routes.values())

    @property
    def rps(self) -> float:
        return self.total / self.window_s if self.window_s else float("nan")

    def merged(self, names: Iterable[str]) -> RouteStats:
        merged = RouteStats()
        for name in names:
            merged.samples_ms += self.routes[name].samples_ms
            merged.statuses += self.routes[name].statuses
        return merged

    @property
    def server_errors(self) -> int:
        mixed = sum(r.server_errors for r in self.routes.values())
        return mixed + sum(stats.server_errors for stats, _, _ in self.creates.values())

    def create_figures(self, clients: int) -> tuple[float, float]:
        """(req/s, p99 ms) of the create-only phase at `clients` (nan when not run)."""
        if clients not in self.creates:
            return float("nan"), float("nan")
        stats, window, _ = self.creates[clients]
        return (stats.count / window if window else float("nan")), stats.p99


# --- processes ----------------------------------------------------------------------------------


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / common.CLK_TCK  # idle and iowait are not busy


def stop(child: common.Child) -> None:
    """SIGINT, a clean stop in which a server under cProfile writes its file; then SIGKILL."""
    child.stop(signal.SIGINT, STOP_WAIT_S)


def start_server(
    tmp: Path, config: Path, env: dict[str, str], profile: Path | None
) -> common.Child:
    opts = ["-m", "cProfile", "-o", str(profile)] if profile else []
    return common.Child(
        "warden run all" + (" (under cProfile)" if profile else ""),
        common.warden_argv("run", "all", "--config", str(config), python_opts=opts),
        tmp / ("server-profiled.log" if profile else "server.log"),
        env,
    )


# --- the API ------------------------------------------------------------------------------------


def iso(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def today() -> datetime:
    now = datetime.now(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


class Api:
    def __init__(self, base: str, session: aiohttp.ClientSession) -> None:
        self.base = base.rstrip("/")
        self.session = session

    def url(self, path: str, params: dict[str, str] | None = None) -> URL:
        """An encoded URL (made once: building URLs per request costs the bench CPU)."""
        url = URL(self.base + API + path)
        return url.with_query(params) if params else url

    async def get(self, path: str, token: str | None = None, **params: str) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.get(self.url(path, params or None), headers=headers) as response:
            body = await response.read()
            return response.status, _json(body)

    async def post(self, path: str, body: Any, token: str | None = None) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.post(self.url(path), json=body, headers=headers) as response:
            return response.status, _json(await response.read())

    async def login(self, username: str, password: str) -> str:
        status, body = await self.post("/session", {"username": username, "password": password})
        if status != 201:
            raise RuntimeError(f"login of {username}: HTTP {status} {body}")
        return str(body["access_token"])


def _json(body: bytes) -> Any:
    try:
        return json.loads(body) if body else None
    except ValueError:
        return body.decode(errors="replace")


async def wait_until(
    what: str,
    check: Callable[[], Awaitable[Any]],
    alive: Callable[[], None],
    timeout_s: float = START_DEADLINE_S,
) -> Any:
    """Call `check()` until it answers something true (the server not answering yet is fine)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        with contextlib.suppress(TimeoutError, aiohttp.ClientError, OSError):
            found = await check()
            if found:
                return found
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not within {timeout_s:g}s")
        await asyncio.sleep(0.25)


async def known_gpus(api: Api, token: str) -> dict[str, list[str]]:
    """Host -> the uuids of its GPUs by index, as the reservations service knows them."""
    start = today()
    status, body = await api.get(
        "/reservations/overview",
        token,
        start=iso(start),
        end=iso(start + DAY),
        slot_minutes="60",
    )
    if status != 200:
        return {}
    found: dict[str, list[str]] = {}
    for host in body["hosts"]:
        gpus = sorted(host["gpus"], key=lambda g: g["index"])
        found[host["host"]] = [g["uuid"] for g in gpus]
    return found


async def wait_ready(api: Api, alive: Callable[[], None]) -> tuple[str, dict[str, list[str]], str]:
    """Once health is 200 and all 400 GPUs are known: (admin token, GPUs by host, how
    GET /gpus answers)."""

    async def healthy() -> bool:
        status, _ = await api.get("/health")
        return status == 200

    await wait_until("GET /api/v1/health = 200", healthy, alive)
    admin = await api.login(ADMIN, PASSWORD)

    async def all_known() -> dict[str, list[str]]:
        found = await known_gpus(api, admin)
        return found if sum(map(len, found.values())) >= HOSTS * GPUS_PER_HOST else {}

    by_host: dict[str, list[str]] = await wait_until(
        f"all {HOSTS * GPUS_PER_HOST} GPUs known to the reservations service", all_known, alive
    )

    async def gpus_listed() -> str:
        status, body = await api.get("/gpus", admin)
        if status == 404:
            return "404 (GET /api/v1/gpus not there yet)"
        if status != 200:
            return ""
        listed = len(body.get("gpus") or [])
        return f"200, {listed} GPUs" if listed >= HOSTS * GPUS_PER_HOST else ""

    gpus_route = await wait_until("GET /api/v1/gpus listing all GPUs", gpus_listed, alive)
    return admin, by_host, gpus_route


# --- seeding ------------------------------------------------------------------------------------


class Timeline:
    """Busy intervals of one GPU (epoch seconds), unsorted: a few dozen per GPU at most."""

    def __init__(self) -> None:
        self.busy: list[tuple[float, float]] = []

    def free(self, start: float, end: float) -> bool:
        return all(end <= s or e <= start for s, e in self.busy)

    def take(self, start: float, end: float) -> None:
        self.busy.append((start, end))


@dataclass
class SeedStats:
    created: int = 0
    conflicts: int = 0
    given_up: int = 0
    errors: int = 0


@dataclass(frozen=True)
class Planned:
    owner: str
    gpus: list[str]
    start: datetime
    end: datetime
    title: str


class Planner:
    """Reservations that never overlap on a GPU, placed at random (big ones first), from the
    next full hour to SEED_AHEAD from now, on 1, 2, 4 or 8 GPUs of one host, 1-12 h."""

    def __init__(self, by_host: dict[str, list[str]], seed_value: int) -> None:
        self.rng = random.Random(seed_value)
        self.by_host = by_host
        self.hosts = sorted(by_host)
        self.timelines = {uuid: Timeline() for uuids in by_host.values() for uuid in uuids}
        now = datetime.now(UTC)
        self.origin = now.replace(minute=0, second=0, microsecond=0) + HOUR
        self.half_hours = int((now + SEED_AHEAD - self.origin) / HALF_HOUR)

    def sizes(self, count: int) -> list[int]:
        weights = [w for _, w in SEED_SIZES]
        return sorted(self.rng.choices([s for s, _ in SEED_SIZES], weights, k=count), reverse=True)

    def plan(self, size: int) -> Planned:
        rng = self.rng
        while True:
            for _ in range(200):
                duration = rng.randint(2, 24) * HALF_HOUR  # 1-12 h
                slot = rng.randrange(self.half_hours - duration // HALF_HOUR)
                start = self.origin + slot * HALF_HOUR
                end = start + duration
                chosen = rng.sample(self.by_host[rng.choice(self.hosts)], size)
                s, e = start.timestamp(), end.timestamp()
                if all(self.timelines[uuid].free(s, e) for uuid in chosen):
                    for uuid in chosen:
                        self.timelines[uuid].take(s, e)
                    owner, title = rng.choice(USERS), rng.choice(SEED_TITLES)
                    return Planned(owner, sorted(chosen), start, end, title)
            size = max(1, size // 2)  # a crowded plan: smaller


async def seed_through_api(
    api: Api, admin: str, by_host: dict[str, list[str]], count: int, seed_value: int
) -> SeedStats:
    """The plan created by admin for its owners, SEED_CLIENTS requests at a time."""
    planner = Planner(by_host, seed_value)
    stats = SeedStats()
    pending = iter(planner.sizes(count))
    url = api.url("/reservations")
    headers = {"Authorization": f"Bearer {admin}"}

    async def worker() -> None:
        for size in pending:
            for _ in range(SEED_ATTEMPTS):
                p = planner.plan(size)
                body = {
                    "gpus": p.gpus,
                    "start": iso(p.start),
                    "end": iso(p.end),
                    "title": p.title,
                    "owner": p.owner,
                }
                async with api.session.post(url, json=body, headers=headers) as response:
                    text = await response.read()
                    status = response.status
                if status == 201:
                    stats.created += 1
                    break
                if status == 409:  # a reservation made outside the plan: elsewhere
                    stats.conflicts += 1
                    continue
                stats.errors += 1
                if stats.errors <= 5:
                    print(f"  seeding: HTTP {status} {text[:300]!r}", flush=True)
                break
            else:
                stats.given_up += 1

    await asyncio.gather(*(worker() for _ in range(SEED_CLIENTS)))
    return stats


async def seed_into_database(
    config: Path, tmp: Path, by_host: dict[str, list[str]], count: int, seed_value: int
) -> SeedStats:
    """The same plan inserted straight into the tables `reservations` and
    `reservations_gpu_slots` while the server is stopped (as bench/reservations_load.py)."""
    planner = Planner(by_host, seed_value)
    plan = [planner.plan(size) for size in planner.sizes(count)]
    settings = load_settings(config, environ={"HOME": str(tmp)})
    engine = db.create_engine(settings.storage.database_url_for("reservations"))
    try:
        async with engine.begin() as conn:
            found = (await conn.execute(select(func.max(reservations.c.id)))).scalar()
            created = to_ms(datetime.now(UTC)) - 3_600_000
            rows: list[dict[str, Any]] = []
            slots: list[dict[str, Any]] = []
            for rid, p in enumerate(plan, start=int(found or 0) + 1):
                start_ms, end_ms = to_ms(p.start), to_ms(p.end)
                rows.append(
                    {
                        "id": rid,
                        "owner": p.owner,
                        "title": p.title,
                        "description": "",
                        "start_ms": start_ms,
                        "end_ms": end_ms,
                        "status": "active",
                        "created_by": ADMIN,
                        "created_at_ms": created,
                        "updated_at_ms": created,
                        "cancelled_by_rules": False,
                        "started_event_ms": None,
                        "ended_event_ms": None,
                    }
                )
                slots.extend(
                    {
                        "reservation_id": rid,
                        "gpu_uuid": uuid,
                        "owner": p.owner,
                        "start_ms": start_ms,
                        "end_ms": end_ms,
                        "active": True,
                    }
                    for uuid in p.gpus
                )
            for table, items in ((reservations, rows), (gpu_slots, slots)):
                for i in range(0, len(items), CHUNK):
                    await conn.execute(insert(table), items[i : i + CHUNK])
    finally:
        await engine.dispose()
    return SeedStats(created=len(plan))


# --- load ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Request:
    route: str
    method: str
    url: URL
    body: bytes | None = None


class Workload:
    """Draws the requests of the mix (URLs of the reads made beforehand)."""

    def __init__(
        self,
        api: Api,
        by_host: dict[str, list[str]],
        mix: tuple[tuple[str, float], ...],
        seed_value: int,
    ) -> None:
        rng = random.Random(seed_value)
        self.api = api
        self.hosts = sorted(by_host)
        self.by_host = by_host
        day0 = today()
        self.gpus_url = api.url("/gpus")
        self.create_url = api.url("/reservations")
        self.range_urls = []
        self.overview_urls = []
        for _ in range(URLS_PER_ROUTE):
            start = day0 + rng.randrange(7 * 7) * DAY
            gpus = ",".join(by_host[rng.choice(self.hosts)])
            self.range_urls.append(
                api.url(
                    "/reservations",
                    {"start": iso(start), "end": iso(start + WEEK), "gpus": gpus, "limit": "500"},
                )
            )
            start = day0 + rng.randrange(6 * 7) * DAY
            gpus = ",".join(by_host[rng.choice(self.hosts)])
            self.overview_urls.append(
                api.url(
                    "/reservations/overview",
                    {
                        "start": iso(start),
                        "end": iso(start + 2 * WEEK),
                        "slot_minutes": "60",
                        "gpus": gpus,
                    },
                )
            )
        self.thresholds: list[tuple[float, str]] = []
        total, whole = 0.0, sum(percent for _, percent in mix)
        for route, percent in mix:
            total += percent / whole
            self.thresholds.append((total, route))
        now = datetime.now(UTC)
        self.first_create = now.replace(minute=0, second=0, microsecond=0) + WEEK

    def views(self, rng: random.Random) -> list[URL]:
        """The calendar views one client polls."""
        return rng.sample(self.range_urls, VIEWS_PER_CLIENT)

    def draw(self, rng: random.Random, views: list[URL]) -> Request:
        x = rng.random()
        route = next((r for limit, r in self.thresholds if x < limit), self.thresholds[-1][1])
        if route == "gpus":
            return Request(route, "GET", self.gpus_url)
        if route == "range":
            return Request(route, "GET", rng.choice(views))
        if route == "overview":
            return Request(route, "GET", rng.choice(self.overview_urls))
        start = self.first_create + rng.randrange(7 * 7 * 48) * HALF_HOUR  # 1-8 weeks ahead
        body = {
            "gpus": rng.sample(self.by_host[rng.choice(self.hosts)], rng.randint(1, 2)),
            "start": iso(start),
            "end": iso(start + rng.randint(1, 4) * HOUR),
            "title": "bench",
        }
        return Request(route, "POST", self.create_url, json.dumps(body).encode())


async def run_load(  # noqa: C901 - the load loop: phases, pacing, per-client tasks, results
    api: Api,
    workload: Workload,
    tokens: dict[str, str],
    cfg: Config,
    cpu_now: Callable[[], Cpu],
) -> tuple[dict[str, RouteStats], float, Cpu]:
    """CLIENTS closed-loop clients: a warm-up, then the recorded window."""
    routes = {route: RouteStats() for route in ROUTES}
    loop = asyncio.get_running_loop()
    window_start = loop.time() + cfg.warmup_s
    window_end = window_start + cfg.duration_s
    last_done = 0.0
    shown: Counter[tuple[str, int]] = Counter()

    async def client(i: int) -> None:  # noqa: C901 - one client's request mix; one branch per kind of request
        nonlocal last_done
        rng = random.Random(cfg.seed * 1000 + i)
        auth = {"Authorization": f"Bearer {tokens[USERS[i % len(USERS)]]}"}
        post = {**auth, "Content-Type": "application/json"}
        session = api.session
        views = workload.views(rng)
        tags: dict[URL, str] = {}  # the ETag of the last answer per URL polled
        while True:
            began = loop.time()
            if began >= window_end:
                return
            request = workload.draw(rng, views)
            stats = routes[request.route]
            headers = post if request.body else auth
            tag = tags.get(request.url)
            if tag is not None:
                headers = {**auth, "If-None-Match": tag}
            started = time.perf_counter()
            try:
                async with session.request(
                    request.method, request.url, data=request.body, headers=headers
                ) as response:
                    body = await response.read()
                    status = response.status
                    if cfg.etag and status == 200 and request.route in CONDITIONAL:
                        etag = response.headers.get("ETag")
                        if etag:
                            tags[request.url] = etag
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                if began >= window_start:
                    stats.failures += 1
                    if stats.failures <= 3:
                        print(f"  {request.route}: no answer: {err!r}", flush=True)
                continue
            if began < window_start:
                continue
            stats.record(started, status, len(body))
            last_done = loop.time()
            if not 200 <= status < 300 and status not in VALID_REFUSALS.get(request.route, ()):
                shown[(request.route, status)] += 1
                if shown[(request.route, status)] <= 2:
                    print(f"  {request.route}: HTTP {status} {body[:300]!r}", flush=True)

    async def cpu_at_window_start() -> Cpu:
        await asyncio.sleep(max(0.0, window_start - loop.time()))
        return cpu_now()

    cpu_task = asyncio.create_task(cpu_at_window_start())
    await asyncio.gather(*(client(i) for i in range(CLIENTS)))
    cpu = cpu_now().minus(await cpu_task)
    return routes, max(last_done, window_end) - window_start, cpu


class CreatePlan:
    """Creates that never conflict: the n-th takes GPU n mod len(gpus) for the hour n div
    len(gpus) from CREATE_AHEAD on (after the seeded and the mixed-phase reservations)."""

    def __init__(self, by_host: dict[str, list[str]]) -> None:
        self.gpus = [uuid for host in sorted(by_host) for uuid in by_host[host]]
        now = datetime.now(UTC)
        self.origin = now.replace(minute=0, second=0, microsecond=0) + CREATE_AHEAD
        self.made = 0

    def next_body(self) -> bytes:
        n, self.made = self.made, self.made + 1
        hour, gpu = divmod(n, len(self.gpus))
        start = self.origin + hour * HOUR
        body = {
            "gpus": [self.gpus[gpu]],
            "start": iso(start),
            "end": iso(start + HOUR),
            "title": "bench create",
        }
        return json.dumps(body).encode()


async def run_creates(  # noqa: C901 - the create-only phase: pacing, refusals and timings kept together
    api: Api,
    plan: CreatePlan,
    tokens: dict[str, str],
    clients: int,
    cfg: Config,
    cpu_now: Callable[[], Cpu],
) -> tuple[RouteStats, float, Cpu]:
    """`clients` closed-loop clients creating reservations: 1 s warm-up, then the window."""
    stats = RouteStats()
    loop = asyncio.get_running_loop()
    window_start = loop.time() + (0.5 if cfg.quick else 1.0)
    window_end = window_start + cfg.create_duration_s
    last_done = 0.0
    url = api.url("/reservations")
    shown = 0

    async def client(i: int) -> None:
        nonlocal last_done, shown
        headers = {
            "Authorization": f"Bearer {tokens[USERS[i % len(USERS)]]}",
            "Content-Type": "application/json",
        }
        while True:
            began = loop.time()
            if began >= window_end:
                return
            body = plan.next_body()
            started = time.perf_counter()
            try:
                async with api.session.post(url, data=body, headers=headers) as response:
                    text = await response.read()
                    status = response.status
            except (TimeoutError, aiohttp.ClientError, OSError) as err:
                if began >= window_start:
                    stats.failures += 1
                    if stats.failures <= 3:
                        print(f"  create x{clients}: no answer: {err!r}", flush=True)
                continue
            if began < window_start:
                continue
            stats.record(started, status, len(text))
            last_done = loop.time()
            if status != 201:
                shown += 1
                if shown <= 3:
                    print(f"  create x{clients}: HTTP {status} {text[:300]!r}", flush=True)

    async def cpu_at_window_start() -> Cpu:
        await asyncio.sleep(max(0.0, window_start - loop.time()))
        return cpu_now()

    cpu_task = asyncio.create_task(cpu_at_window_start())
    await asyncio.gather(*(client(i) for i in range(clients)))
    cpu = cpu_now().minus(await cpu_task)
    return stats, max(last_done, window_end) - window_start, cpu


async def sign_in_all(api: Api, password: str) -> dict[str, str]:
    tokens: dict[str, str] = {}

    async def one(user: str) -> None:
        tokens[user] = await api.login(user, password)

    await asyncio.gather(*(one(u) for u in USERS))
    return tokens


# --- the run ------------------------------------------------------------------------------------


def new_session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=2 * CLIENTS, limit_per_host=0, keepalive_timeout=60)
    return aiohttp.ClientSession(
        connector=connector, timeout=aiohttp.ClientTimeout(total=REQUEST_TIMEOUT_S)
    )


async def load_against(
    api: Api, cfg: Config, result: Result, by_host: dict[str, list[str]], cpu_now: Callable[[], Cpu]
) -> None:
    tokens = await sign_in_all(api, cfg.password)
    workload = Workload(api, by_host, cfg.mix, cfg.seed + 1)
    print(
        f"load: {CLIENTS} clients, {cfg.warmup_s:g}s warm-up + {cfg.duration_s:g}s recorded ...",
        flush=True,
    )
    result.routes, result.window_s, result.cpu = await run_load(api, workload, tokens, cfg, cpu_now)
    plan = CreatePlan(by_host)
    for clients in cfg.create_clients:
        print(
            f"create-only: {clients} clients, {cfg.create_duration_s:g}s recorded ...", flush=True
        )
        result.creates[clients] = await run_creates(api, plan, tokens, clients, cfg, cpu_now)


async def run_remote(cfg: Config) -> Result:
    """--url: only the load, against a server already running."""
    assert cfg.url is not None
    result = Result(cfg, {})
    pid = cfg.server_pid
    result.server = f"already running at {cfg.url}" + (
        f", pid {pid}" if pid else " (--server-pid not given: its CPU is nan)"
    )

    def cpu_now() -> Cpu:
        return Cpu(common.own_cpu_seconds(), common.cpu_seconds(pid) if pid else float("nan"))

    async with new_session() as session:
        api = Api(cfg.url, session)
        token = await api.login(USERS[0], cfg.password)
        by_host = await known_gpus(api, token)
        if not by_host:
            raise RuntimeError(f"{cfg.url}: no GPUs known to the reservations service")
        status, _ = await api.get("/gpus", token)
        result.gpus_route = str(status)
        await load_against(api, cfg, result, by_host, cpu_now)
    return result


async def run_local(cfg: Config, tmp: Path) -> Result:
    """Set-up, seeding and load against a server this bench starts (and stops)."""
    result = Result(cfg, {})
    env = common.child_env(tmp)
    children: list[common.Child] = []
    try:
        t0 = time.monotonic()
        options = ["--hosts", str(HOSTS), "--gpus-per-host", str(GPUS_PER_HOST), "--no-churn"]
        sim = common.start_sim(tmp, env, *options, "--seed", str(SIM_SEED))
        children.append(sim)
        await sim.wait_for_line(common.SIM_READY, START_DEADLINE_S)
        known_hosts, hosts = common.sim_hosts(tmp)
        port = common.free_port()
        config = common.write_config(
            tmp,
            known_hosts=known_hosts,
            hosts=hosts,
            gateway={"host": "127.0.0.1", "port": port, "login_failures_per_ip": 1000},
        )
        users = [(user, False) for user in USERS] + [(ADMIN, True)]
        await common.prepare_databases(
            load_settings(config, environ={"HOME": str(tmp)}), users, PASSWORD
        )
        result.setup_s["sim+db"] = time.monotonic() - t0

        t0 = time.monotonic()
        server = start_server(tmp, config, env, None)
        children.append(server)

        def alive() -> None:
            sim.check_alive()
            server.check_alive()

        base = f"http://127.0.0.1:{port}"
        async with new_session() as session:
            api = Api(base, session)
            admin, by_host, result.gpus_route = await wait_ready(api, alive)
            result.setup_s["start+discover"] = time.monotonic() - t0
            print(
                f"server ready at {base} (pid {server.pid}) in "
                f"{result.setup_s['start+discover']:.1f}s; seeding {cfg.reservations:,} "
                f"reservations ({'through the API' if cfg.seed_via == 'api' else 'into SQLite'})"
                " ...",
                flush=True,
            )
            if cfg.seed_via == "api":
                t0 = time.monotonic()
                seeded = await seed_through_api(api, admin, by_host, cfg.reservations, cfg.seed)
                result.setup_s["seed (API)"] = time.monotonic() - t0
        restart = cfg.seed_via == "db" or cfg.server_profile is not None
        if restart:
            t0 = time.monotonic()
            stop(server)
            result.setup_s["stop"] = time.monotonic() - t0
        if cfg.seed_via == "db":
            t0 = time.monotonic()
            seeded = await seed_into_database(config, tmp, by_host, cfg.reservations, cfg.seed)
            result.setup_s["seed (SQLite)"] = time.monotonic() - t0
        seed_s = result.setup_s.get("seed (API)") or result.setup_s["seed (SQLite)"]
        result.seeded, result.seed_conflicts = seeded.created, seeded.conflicts
        result.seed_given_up = seeded.given_up + seeded.errors
        print(
            f"  seeded {seeded.created:,} in {seed_s:.1f}s ({seeded.created / seed_s:,.0f}/s; "
            f"{seeded.conflicts} conflicts planned again, {seeded.given_up} given up, "
            f"{seeded.errors} errors)",
            flush=True,
        )
        if restart:
            t0 = time.monotonic()
            server = start_server(tmp, config, env, cfg.server_profile)
            children.append(server)
            async with new_session() as session:
                _, by_host, result.gpus_route = await wait_ready(Api(base, session), alive)
            result.setup_s["restart+discover"] = time.monotonic() - t0

        result.server = (
            f"pid {server.pid}" + (" under cProfile" if cfg.server_profile else "") + f", {base}"
        )
        if cfg.serve:
            print(
                f"serving at {base} (config {config}); load it with "
                f"`bench/api_load.py --url {base}`; Ctrl-C to stop",
                flush=True,
            )
            while True:
                alive()
                await asyncio.sleep(1.0)

        def cpu_now() -> Cpu:
            return Cpu(
                common.own_cpu_seconds(),
                common.cpu_seconds(server.pid),
                common.cpu_seconds(sim.pid),
            )

        async with new_session() as session:
            await load_against(Api(base, session), cfg, result, by_host, cpu_now)
        server.check_alive()
    finally:
        for child in reversed(children):
            stop(child)
    return result


async def run(cfg: Config) -> Result:
    if cfg.url:
        return await run_remote(cfg)
    tmp = Path(tempfile.mkdtemp(prefix="warden-bench-api-"))
    try:
        return await run_local(cfg, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


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


# --- main ---------------------------------------------------------------------------------------


def parse_args(argv: list[str]) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "1,000 reservations, 1 s + 5 s of load")
    ap.add_argument("--duration", type=float, help="recorded seconds of load (30; --quick: 5)")
    ap.add_argument("--reservations", type=int, help="reservations seeded (10,000; --quick: 1,000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (1)")
    ap.add_argument(
        "--seed-via",
        choices=("db", "api"),
        default="db",
        help="seed into SQLite with the server stopped (db, default), or by POST as admin (api)",
    )
    ap.add_argument("--url", help="only load a server already running there (e.g. left by --serve)")
    ap.add_argument(
        "--mix",
        metavar="ROUTE=PCT,...",
        help="another mix, e.g. gpus=50,range=50 (default "
        + ",".join(f"{r}={p:g}" for r, p in MIX)
        + "): to load one route alone",
    )
    ap.add_argument(
        "--server-pid", type=int, metavar="PID", help="with --url: the server's pid (its CPU)"
    )
    ap.add_argument("--password", default=PASSWORD, help="password of user00..user49 (--url)")
    ap.add_argument(
        "--serve", action="store_true", help="set up and seed, then serve until Ctrl-C (no load)"
    )
    ap.add_argument(
        "--server-profile",
        type=Path,
        metavar="PATH",
        help="after seeding, restart the server under cProfile writing PATH; print its top",
    )
    ap.add_argument(
        "--no-etag",
        action="store_true",
        help="plain GETs in the mix (no If-None-Match): to compare",
    )
    ap.add_argument(
        "--create-clients",
        default=",".join(map(str, CREATE_CLIENTS)),
        help="client counts of the create-only phase (1,8,64; empty: skip it)",
    )
    ap.add_argument(
        "--create-duration", type=float, help="recorded seconds per count (10; --quick: 2)"
    )
    return ap.parse_args(argv)


def parse_mix(text: str) -> tuple[tuple[str, float], ...]:
    mix = []
    for part in text.split(","):
        route, _, percent = part.partition("=")
        if route.strip() not in ROUTES:
            raise SystemExit(f"--mix: unknown route {route!r} (routes: {', '.join(ROUTES)})")
        try:
            mix.append((route.strip(), float(percent)))
        except ValueError:
            raise SystemExit(f"--mix: {part!r} is not ROUTE=PERCENT") from None
    if sum(p for _, p in mix) <= 0 or any(p < 0 for _, p in mix):
        raise SystemExit("--mix: the percentages must be positive")
    return tuple(mix)


def make_config(args: argparse.Namespace) -> Config:
    cfg = Config(
        quick=args.quick,
        duration_s=args.duration or (5.0 if args.quick else 30.0),
        warmup_s=1.0 if args.quick else 3.0,
        reservations=args.reservations
        if args.reservations is not None
        else (1_000 if args.quick else 10_000),
        seed=args.seed,
        url=args.url,
        serve=args.serve,
        server_profile=args.server_profile.resolve() if args.server_profile else None,
        password=args.password,
        seed_via=args.seed_via,
        mix=parse_mix(args.mix) if args.mix else MIX,
        server_pid=args.server_pid,
        etag=not args.no_etag,
        create_clients=tuple(int(n) for n in args.create_clients.split(",") if n.strip()),
        create_duration_s=args.create_duration or (2.0 if args.quick else 10.0),
    )
    if cfg.url and (cfg.serve or cfg.server_profile):
        raise SystemExit("--url loads a running server: not with --serve or --server-profile")
    if cfg.server_pid and not cfg.url:
        raise SystemExit("--server-pid goes with --url (the bench knows its own server)")
    if cfg.duration_s <= 0 or cfg.reservations < 0:
        raise SystemExit("--duration must be positive and --reservations not negative")
    return cfg


def main(argv: list[str] | None = None) -> int:
    cfg = make_config(parse_args(sys.argv[1:] if argv is None else argv))
    result = common.run_async(run(cfg), "server and simulator stopped, temporary files removed")
    report(result)
    if cfg.server_profile is not None:
        print_profile(cfg.server_profile)
    print_result_line(result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
