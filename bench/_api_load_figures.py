"""The figures of bench/api_load.py and what they are measured against: its constants (the
fleet, the accounts, the request mix, the targets), its `Config`, `RouteStats` (the recorded
requests of one route), `Cpu` (the CPU seconds of the bench, the server, the simulator and the
whole machine) and `Result`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

import _common as common

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


def machine_cpu_s() -> float:
    """Busy CPU seconds of the whole machine since boot (all cores), from /proc/stat."""
    try:
        with open("/proc/stat") as stat:
            ticks = [int(x) for x in stat.readline().split()[1:9]]
    except (OSError, ValueError):
        return float("nan")
    return (sum(ticks) - ticks[3] - ticks[4]) / common.CLK_TCK  # idle and iowait are not busy
