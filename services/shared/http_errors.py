"""One table from error codes to HTTP statuses, and the JSON error envelope, for every HTTP
server of Warden (the gateway, the simulator's control API).

Every error response is `{"error": CODE, "message": ..., "details": ...}`. An error that is not
one of ours is logged with its context and answered with a 500 that reveals nothing.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

from services.shared.errors import WardenError

log = logging.getLogger("warden.http")

# Paths whose last part is a credential (a calendar feed's token, an idle notice's link):
# logged masked.
_SECRET_IN_PATH = re.compile(r"(/calendar/|/idle/links/)[^/]+?(\.ics)?$")


def loggable_path(path: str) -> str:
    """The request path as logs may show it: a secret in it replaced by `***`."""
    return _SECRET_IN_PATH.sub(lambda m: f"{m.group(1)}***{m.group(2) or ''}", path)


STATUS_BY_CODE: dict[str, int] = {
    "invalid_request": 400,
    "invalid_json": 400,
    "validation_failed": 422,
    "contract_violation": 422,
    # Tasks of one job would share a GPU the job did not say they may (services/jobs).
    "gpus_shared": 422,
    "not_found": 404,
    "authentication_failed": 401,
    "authentication_required": 401,
    "too_many_attempts": 429,
    "forbidden": 403,
    "not_allowed": 403,
    "already_exists": 409,
    "reservation_conflict": 409,
    "state_conflict": 409,
    "service_unavailable": 503,
    "remote_error": 502,
    # A GPU host could not be reached or did not do what was asked (the reason says which).
    "host_unreachable": 502,
    "task_remote_failed": 502,
    "remote_command_failed": 502,
}


def error_response(status: int, code: str, message: str, details: Any = None) -> web.Response:
    response = web.json_response(
        {"error": code, "message": message, "details": details or {}}, status=status
    )
    if status == 401:
        response.headers["WWW-Authenticate"] = 'Bearer realm="warden"'
    if status == 429 and isinstance(details, dict) and "retry_after_s" in details:
        response.headers["Retry-After"] = str(max(1, int(details["retry_after_s"] + 0.999)))
    return response


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@web.middleware
async def error_middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
    try:
        return await handler(request)
    except WardenError as err:
        status = STATUS_BY_CODE.get(err.code, 500)
        if status >= 500 and status != 503:
            log.error("%s %s failed: %s", request.method, loggable_path(request.path), err.message)
        return error_response(status, err.code, err.message, err.details)
    except web.HTTPException as err:
        if err.status < 400:
            raise
        code = err.reason.lower().replace(" ", "_").replace("-", "_")
        response = error_response(err.status, code, err.reason)
        # Keep what the status needs, such as `Allow` on a 405.
        for name, value in err.headers.items():
            if name.lower() not in ("content-type", "content-length"):
                response.headers[name] = value
        return response
    except Exception:
        log.exception("%s %s failed", request.method, loggable_path(request.path))
        return error_response(500, "internal_error", "internal error; see the server log")
