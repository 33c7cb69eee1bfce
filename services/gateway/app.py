"""The gateway's aiohttp application: the REST API under /api/v1, its contract, the live stream
and the web UI.
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import Sequence
from pathlib import Path

from aiohttp import web

from services.gateway import calendar_loader, frontend
from services.gateway.auth import Revocations, TokenIssuer
from services.gateway.calendar import CalendarView
from services.gateway.context import (
    BACKGROUND,
    BACKGROUND_TEARDOWNS,
    BOARD,
    BUS,
    CALENDAR,
    LIMITS,
    REPLICAS,
    REVOCATIONS,
    SETTINGS,
    STREAM,
    TOKENS,
)
from services.gateway.cors import cors_middleware
from services.gateway.fleet_board import FleetBoard
from services.gateway.limits import limits_from
from services.gateway.metrics_route import metrics_handler
from services.gateway.openapi import build_spec, docs_page
from services.gateway.routes import ROUTES
from services.gateway.routes.meta import BACKENDS
from services.gateway.routing import API, Authenticator, Route, wrap
from services.gateway.stream import StreamHub
from services.shared.bus import Bus
from services.shared.cluster.replicas import Replicas
from services.shared.config import Settings
from services.shared.http_errors import error_middleware
from services.shared.metrics.http import latency_middleware

__all__ = ["BACKENDS", "create_app"]


def _swagger_ui_dir() -> Path:
    import swagger_ui_bundle  # the docs page's scripts, shipped in a wheel: no CDN

    return Path(swagger_ui_bundle.swagger_ui_path)


def create_app(
    settings: Settings,
    bus: Bus,
    routes: Sequence[Route] = ROUTES,
    replicas: Replicas | None = None,
) -> web.Application:
    """`replicas`: this gateway's replica, watching every service's (health shows them)."""
    timed = latency_middleware("gateway", replicas.replica_id if replicas else "")
    app = web.Application(
        middlewares=[timed, cors_middleware(settings.gateway.cors_origins), error_middleware],
        client_max_size=1024**2,
    )
    if replicas is not None:
        app[REPLICAS] = replicas
    secret = settings.auth.jwt_secret or secrets.token_urlsafe(48)  # --dev without a secret
    tokens = TokenIssuer(secret, settings.auth.access_token_ttl_s)
    app[SETTINGS] = settings
    app[BUS] = bus
    app[TOKENS] = tokens
    gateway = settings.gateway
    app[BACKGROUND] = []
    app[BACKGROUND_TEARDOWNS] = []
    # Counted by the reservations service, for every gateway replica alike (limits.py).
    app[LIMITS] = limits_from(
        gateway.login_window_s, gateway.login_failures_per_user, gateway.login_failures_per_ip
    )
    app[STREAM] = StreamHub(
        bus, gateway.stream_replay_events, resume_window_s=gateway.stream_resume_window_s
    )
    app[CALENDAR] = CalendarView()
    calendar_loader.follow_events(app[CALENDAR], app[STREAM])
    app[BOARD] = FleetBoard(app[CALENDAR])
    app[REVOCATIONS] = Revocations(settings.auth.access_token_ttl_s)
    authenticator = Authenticator(tokens, app[REVOCATIONS])
    for route in routes:
        app.router.add_route(
            route.method, route.full_path, wrap(route, authenticator, bus, settings)
        )

    document = json.dumps(build_spec(routes))

    async def openapi(_request: web.Request) -> web.Response:
        """Public. The OpenAPI 3 document of this API."""
        return web.Response(text=document, content_type="application/json")

    async def docs(_request: web.Request) -> web.Response:
        """Public. Interactive API documentation (Swagger UI, served from here)."""
        return web.Response(text=docs_page(), content_type="text/html")

    app.router.add_get(f"{API}/openapi.json", openapi)
    app.router.add_get(f"{API}/docs", docs)
    app.router.add_static(f"{API}/docs/static", _swagger_ui_dir())
    app.router.add_get("/metrics", metrics_handler(authenticator, settings.metrics.token))
    frontend.add_docs_routes(app)
    frontend.add_routes(app, frontend.dist_dir(gateway.frontend_dir))

    async def start_stream(app: web.Application) -> None:
        # Every replica hears every revocation: a transient queue of its own.
        app[BACKGROUND_TEARDOWNS].append(
            await bus.subscribe(
                "reservations",
                "session.revoked",
                f"gateway.revocations-{secrets.token_hex(4)}",
                app[REVOCATIONS].on_event,
                transient=True,
            )
        )
        await app[STREAM].start()  # first: no reservation event falls before the load
        loading = asyncio.create_task(calendar_loader.keep(app[CALENDAR], bus))
        app[BACKGROUND].append(loading)

    async def stop_stream(app: web.Application) -> None:
        for teardown in app[BACKGROUND_TEARDOWNS]:
            await teardown()
        for task in app[BACKGROUND]:
            task.cancel()
        await asyncio.gather(*app[BACKGROUND], return_exceptions=True)
        await app[STREAM].close()

    app.on_startup.append(start_stream)
    app.on_shutdown.append(stop_stream)
    return app
