"""The REST API as bench/api_load.py calls it: `Api` (GET and POST on one aiohttp session, the
sign-in), and the waits before the load: `wait_ready` (health, the sign-in of admin, every GPU
known to the reservations service and to GET /gpus), `known_gpus` (each host's GPU uuids).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import aiohttp
from _api_load_figures import (
    ADMIN,
    API,
    DAY,
    GPUS_PER_HOST,
    HOSTS,
    PASSWORD,
    START_DEADLINE_S,
)
from yarl import URL

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
