"""The gateway's GET /api/v1/health, as the tests that start every service watch it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import aiohttp

from services import SERVICE_NAMES
from tests.support.polling import until

Health = tuple[int, dict[str, Any]]  # (HTTP status, body)
Check = Callable[[int, dict[str, Any]], bool]


def all_ok(status: int, body: dict[str, Any]) -> bool:
    return (
        status == 200
        and body["status"] == "ok"
        and all(body["services"].get(n, {}).get("status") == "ok" for n in SERVICE_NAMES)
    )


def only_down(*down: str) -> Check:
    """Degraded: the services `down` unreachable, every other one ok."""

    def check(status: int, body: dict[str, Any]) -> bool:
        services = body["services"]
        return (
            status == 503
            and body["status"] == "degraded"
            and all(services[n]["status"] == "unreachable" for n in down)
            and all(services[n]["status"] == "ok" for n in SERVICE_NAMES if n not in down)
        )

    return check


async def get_health(session: aiohttp.ClientSession, port: int) -> Health:
    url = f"http://127.0.0.1:{port}/api/v1/health"
    async with session.get(url, timeout=aiohttp.ClientTimeout(total=10)) as response:
        return response.status, await response.json()


async def health_until(
    port: int,
    want: Check,
    what: str,
    timeout: float,
    *,
    alive: Callable[[], None],
    interval: float = 0.1,
    report: Callable[[], str] | None = None,
) -> Health:
    """Poll the health of the gateway on `port` until `want(status, body)`. Before each try
    `alive()` fails the test if what should serve it has ended; a timeout fails with the last
    answer and `report()` (logs)."""
    last: object = "no answer yet"
    async with aiohttp.ClientSession() as session:

        async def wanted() -> Health | None:
            nonlocal last
            alive()
            try:
                last = answer = await get_health(session, port)
            except (aiohttp.ClientError, TimeoutError) as err:
                last = repr(err)
                return None
            return answer if want(*answer) else None

        def told() -> str:
            return f"last answer: {last}" + (f"\n{report()}" if report is not None else "")

        return await until(wanted, what, timeout, interval=interval, report=told)
