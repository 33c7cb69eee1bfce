"""The gateway's health endpoint and its error envelope, on the in-process bus.

The app is served by aiohttp's own TestServer on a loopback port; the backends, when a test
needs them, are plain `health` handlers served on the same InProcessBus (no service code, no
broker, no database).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services import __version__
from services.gateway.app import BACKENDS, create_app
from services.shared.bus.inproc import InProcessBus
from services.shared.config import GatewaySettings, Settings
from services.shared.contracts import HEALTH_METHOD
from services.shared.errors import (
    ConfigError,
    ContractError,
    InvalidRequest,
    NotFound,
    RemoteError,
    SchemaNotMigrated,
    ServiceUnavailable,
    WardenError,
)

SETTINGS = Settings(gateway=GatewaySettings(health_timeout_s=0.2), dev=True)
SECRET_TEXT = "password=hunter2 at db.internal"

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def raising(error: BaseException) -> Handler:
    async def handler(_request: web.Request) -> web.StreamResponse:
        raise error

    return handler


def healthy(name: str, status: str = "ok") -> Callable[[dict[str, Any]], Awaitable[Any]]:
    async def health(_args: dict[str, Any]) -> dict[str, Any]:
        return {"service": name, "status": status, "version": "9.9.9"}

    return health


async def get_json(
    client: TestClient[web.Request, web.Application], path: str, method: str = "GET"
) -> tuple[int, Any]:
    response = await client.request(method, path)
    assert response.content_type == "application/json"
    return response.status, await response.json()


# --- health -----------------------------------------------------------------------------------


async def test_health_with_no_backend_running_is_degraded(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health")

    assert status == 503
    assert body["status"] == "degraded"
    assert body["version"] == __version__
    assert body["services"]["gateway"] == {"status": "ok", "version": __version__}
    assert set(body["services"]) == {"gateway", *BACKENDS}
    for name in BACKENDS:
        entry = body["services"][name]
        assert entry["status"] == "unreachable", name
        assert entry["version"] is None
        assert name in entry["detail"]


async def test_health_with_every_backend_answering_is_ok(bus: InProcessBus) -> None:
    for name in BACKENDS:
        await bus.serve(name, {HEALTH_METHOD: healthy(name)})

    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health")

    assert status == 200
    assert body["status"] == "ok"
    for name in BACKENDS:
        assert body["services"][name] == {"status": "ok", "version": "9.9.9"}


async def test_health_names_the_one_backend_that_is_down(bus: InProcessBus) -> None:
    for name in BACKENDS:
        if name != "jobs":
            await bus.serve(name, {HEALTH_METHOD: healthy(name)})

    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health")

    assert status == 503
    assert body["status"] == "degraded"
    assert body["services"]["jobs"]["status"] == "unreachable"
    assert all(body["services"][n]["status"] == "ok" for n in BACKENDS if n != "jobs")


async def test_health_of_a_backend_that_hangs_is_unreachable_within_the_deadline(
    bus: InProcessBus,
) -> None:
    async def hangs(_args: dict[str, Any]) -> Any:
        await asyncio.Event().wait()

    for name in BACKENDS:
        await bus.serve(name, {HEALTH_METHOD: hangs if name == "monitor" else healthy(name)})

    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        # Generous outer bound: the gateway must answer, not hang with the backend.
        status, body = await asyncio.wait_for(get_json(client, "/api/v1/health"), 10)

    assert status == 503
    assert body["services"]["monitor"]["status"] == "unreachable"
    assert body["services"]["reservations"]["status"] == "ok"


async def test_health_of_a_backend_that_fails_is_error(bus: InProcessBus) -> None:
    async def broken(_args: dict[str, Any]) -> Any:
        raise RuntimeError("disk on fire")

    for name in BACKENDS:
        await bus.serve(name, {HEALTH_METHOD: broken if name == "violations" else healthy(name)})

    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health")

    assert status == 503
    assert body["services"]["violations"]["status"] == "error"
    assert body["services"]["jobs"]["status"] == "ok"


async def test_health_reports_a_backend_that_says_it_is_not_ok(bus: InProcessBus) -> None:
    for name in BACKENDS:
        await bus.serve(
            name, {HEALTH_METHOD: healthy(name, "starting" if name == "jobs" else "ok")}
        )

    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health")

    assert status == 503
    assert body["services"]["jobs"]["status"] == "starting"


# --- error envelope ---------------------------------------------------------------------------


async def test_unknown_route_is_a_json_404(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/no-such-thing")

    assert status == 404
    assert body == {"error": "not_found", "message": "Not Found", "details": {}}


async def test_wrong_method_keeps_the_allow_header(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        response = await client.delete("/api/v1/health")

    assert response.status == 405
    assert "GET" in response.headers.get("Allow", "")


async def test_wrong_method_is_a_json_405(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as client:
        status, body = await get_json(client, "/api/v1/health", method="DELETE")

    assert status == 405
    assert set(body) == {"error", "message", "details"}
    assert body["error"] == "method_not_allowed"


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (InvalidRequest("start must be before end", {"field": "start"}), 400),
        (NotFound("no reservation 42", {"reservation": 42}), 404),
        (ContractError("unknown event type", {"type": "x.y"}), 422),
        (RemoteError("jobs.submit failed", {"remote_code": "boom"}), 502),
        (ServiceUnavailable("service 'jobs' is not running", {"service": "jobs"}), 503),
        (ConfigError("bad config", {"bus.prefetch": "too small"}), 500),
        (SchemaNotMigrated("run `warden db upgrade` first", {"service": "jobs"}), 500),
    ],
    ids=lambda v: type(v).__name__ if isinstance(v, WardenError) else str(v),
)
async def test_warden_errors_map_to_their_status_with_their_data(
    bus: InProcessBus, error: WardenError, status: int
) -> None:
    app = create_app(SETTINGS, bus)
    app.router.add_get("/test/raise", raising(error))

    async with TestClient(TestServer(app)) as client:
        got_status, body = await get_json(client, "/test/raise")

    assert got_status == status
    assert body == {"error": error.code, "message": error.message, "details": error.details}


async def test_a_bug_is_a_500_that_reveals_nothing_and_is_logged(
    bus: InProcessBus, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(SETTINGS, bus)
    app.router.add_get("/test/bug", raising(RuntimeError(SECRET_TEXT)))

    with caplog.at_level(logging.ERROR, logger="warden.http"):
        async with TestClient(TestServer(app)) as client:
            response = await client.get("/test/bug")
            text = await response.text()

    assert response.status == 500
    assert response.content_type == "application/json"
    assert SECRET_TEXT not in text
    assert "RuntimeError" not in text
    body = json.loads(text)
    assert body["error"] == "internal_error"
    assert set(body) == {"error", "message", "details"}
    # ... but the log has it, with the request it came from.
    logged = [r for r in caplog.records if r.name == "warden.http"]
    assert any("/test/bug" in r.getMessage() and r.exc_info for r in logged)


async def test_http_exceptions_from_handlers_use_the_envelope(bus: InProcessBus) -> None:
    app = create_app(SETTINGS, bus)
    app.router.add_get("/test/forbidden", raising(web.HTTPForbidden()))

    async with TestClient(TestServer(app)) as client:
        status, body = await get_json(client, "/test/forbidden")

    assert status == 403
    assert body == {"error": "forbidden", "message": "Forbidden", "details": {}}


async def test_redirects_pass_through_the_middleware(bus: InProcessBus) -> None:
    app = create_app(SETTINGS, bus)
    app.router.add_get("/test/moved", raising(web.HTTPFound("/api/v1/health")))

    async with TestClient(TestServer(app)) as client:
        response = await client.get("/test/moved", allow_redirects=False)

    assert response.status == 302
    assert response.headers["Location"] == "/api/v1/health"
