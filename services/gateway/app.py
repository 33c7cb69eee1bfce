"""The gateway's aiohttp application: the REST API under /api/v1."""

from __future__ import annotations

import asyncio
from typing import Any

from aiohttp import web

from services import __version__
from services.gateway.errors import error_middleware
from services.shared.bus import Bus
from services.shared.config import Settings
from services.shared.contracts import HEALTH_METHOD
from services.shared.errors import ServiceUnavailable, WardenError

SETTINGS = web.AppKey("settings", Settings)
BUS = web.AppKey("bus", Bus)

# The services the gateway asks for their health (it answers for itself).
BACKENDS = ("monitor", "reservations", "jobs", "violations")


async def _probe(bus: Bus, service: str, timeout: float) -> dict[str, Any]:
    try:
        answer = await bus.call(service, HEALTH_METHOD, timeout=timeout)
    except ServiceUnavailable as err:
        return {"status": "unreachable", "version": None, "detail": err.message}
    except WardenError as err:
        return {"status": "error", "version": None, "detail": err.message}
    return {"status": answer.get("status", "ok"), "version": answer.get("version")}


async def health(request: web.Request) -> web.Response:
    """Public. Each service with ok / unreachable and its version, within a bounded time."""
    bus, settings = request.app[BUS], request.app[SETTINGS]
    timeout = settings.gateway.health_timeout_s
    answers = await asyncio.gather(*(_probe(bus, name, timeout) for name in BACKENDS))
    services = {"gateway": {"status": "ok", "version": __version__}}
    services.update(zip(BACKENDS, answers, strict=True))
    healthy = all(s["status"] == "ok" for s in services.values())
    return web.json_response(
        {"status": "ok" if healthy else "degraded", "version": __version__, "services": services},
        status=200 if healthy else 503,
    )


def create_app(settings: Settings, bus: Bus) -> web.Application:
    app = web.Application(middlewares=[error_middleware])
    app[SETTINGS] = settings
    app[BUS] = bus
    app.router.add_get("/api/v1/health", health)
    return app
