"""Where Prometheus reads the metrics: a small listener of the process's own, and the gateway's
latency middleware.

`[metrics] port` (0: off) opens `GET /metrics` on `[metrics] host` for every process, whatever
services it runs; anyone who reaches that address may read it, so it binds to loopback unless
told otherwise (a compose network, where no port is published). The gateway also answers
`GET /metrics` on its own port, to admins and to `[metrics] token` (gateway/app.py).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from services.shared.bus import Teardown
from services.shared.errors import ConfigError
from services.shared.metrics import HTTP_REQUESTS, Children, render

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


async def metrics_response(_request: web.Request | None = None) -> web.Response:
    body, content_type = await render()
    response = web.Response(body=body)
    response.headers["Content-Type"] = content_type  # with its version and charset
    return response


async def serve_metrics(host: str, port: int) -> tuple[Teardown, int]:
    """Serve `GET /metrics` on `host:port`; the teardown and the bound port (0: any)."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_response)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as err:
        await runner.cleanup()
        raise ConfigError(
            f"the metrics listener cannot listen on {host}:{port}: {err.strerror or err} "
            "(set metrics.port, or 0 to turn it off)",
            {"metrics.port": err.strerror or str(err)},
        ) from err
    sockets = getattr(site._server, "sockets", None) or []  # the bound port of port 0
    bound = int(sockets[0].getsockname()[1]) if sockets else port
    return runner.cleanup, bound


def latency_middleware(service: str, replica: str) -> Callable[..., Awaitable[web.StreamResponse]]:
    """Times every request by route template (`/api/v1/jobs/{id}`, never the id itself: the
    label set stays small), method and status class; outermost, so it sees error answers."""
    children = Children(HTTP_REQUESTS, service, replica)
    classes = {code: f"{code // 100}xx" for code in range(100, 600)}
    methods = {m: m for m in ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")}

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.perf_counter()
        status = 500
        try:
            response = await handler(request)
            status = response.status
            return response
        except web.HTTPException as err:
            status = err.status
            raise
        finally:
            resource = request.match_info.route.resource
            route = resource.canonical if resource is not None else "unmatched"
            method = methods.get(request.method, "other")
            children(route, method, classes.get(status, "other")).observe(
                time.perf_counter() - started
            )

    return middleware
