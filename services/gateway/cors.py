"""CORS for the configured origins only."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from services.shared.http_errors import Handler

CORS_HEADERS = "Authorization, Content-Type, Last-Event-ID"
CORS_METHODS = "GET, POST, PUT, PATCH, DELETE, OPTIONS"


def cors_middleware(origins: tuple[str, ...]) -> Any:
    """CORS for the configured origins only (`*` allows any); off when there are none."""
    allowed = frozenset(origins)

    @web.middleware
    async def cors(request: web.Request, handler: Handler) -> web.StreamResponse:
        origin = request.headers.get("Origin")
        if not allowed or origin is None or not ("*" in allowed or origin in allowed):
            return await handler(request)
        preflight = request.method == "OPTIONS" and "Access-Control-Request-Method" in (
            request.headers
        )
        response = web.Response(status=204) if preflight else await handler(request)
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Vary"] = "Origin"
        if preflight:
            response.headers["Access-Control-Allow-Methods"] = CORS_METHODS
            response.headers["Access-Control-Allow-Headers"] = CORS_HEADERS
            response.headers["Access-Control-Max-Age"] = "600"
        return response

    return cors
