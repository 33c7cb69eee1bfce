"""`GET /metrics` on the gateway's own port: Prometheus's view of this process, for admins and
for the holder of `[metrics] token` (never public here: this port faces the lab).

The token is compared in constant time and never logged; a wrong one is 401 like a bad sign-in.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable

from aiohttp import web

from services.gateway.routing import AuthenticationRequired, Authenticator
from services.shared.errors import Forbidden
from services.shared.metrics.http import metrics_response


def metrics_handler(
    authenticator: Authenticator, token: str
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    wanted = token.encode()

    async def metrics(request: web.Request) -> web.StreamResponse:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if (
            wanted
            and scheme.lower() == "bearer"
            and hmac.compare_digest(given.strip().encode(), wanted)
        ):
            return await metrics_response()
        caller = authenticator.caller(request)  # a token that is neither: 401
        if caller is None:
            raise AuthenticationRequired(
                "send `Authorization: Bearer <[metrics] token>` or an admin's access token"
            )
        if not caller.is_admin:
            raise Forbidden("only admins and the [metrics] token may read the metrics")
        return await metrics_response()

    return metrics
