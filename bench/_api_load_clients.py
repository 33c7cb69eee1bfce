"""The load of bench/api_load.py: `Workload` (the requests of the mix, drawn at random), `run_load`
(the closed-loop clients of the mix, timed in the recording window), `CreatePlan` and
`run_creates` (the create-only phase), and `sign_in_all`.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime

import aiohttp
from _api_load_api import (
    Api,
    iso,
    today,
)
from _api_load_figures import (
    CLIENTS,
    CONDITIONAL,
    CREATE_AHEAD,
    DAY,
    HALF_HOUR,
    HOUR,
    ROUTES,
    URLS_PER_ROUTE,
    USERS,
    VALID_REFUSALS,
    VIEWS_PER_CLIENT,
    WEEK,
    Config,
    Cpu,
    RouteStats,
)
from yarl import URL

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
