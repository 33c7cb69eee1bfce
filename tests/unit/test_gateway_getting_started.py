"""GET /api/v1/getting-started: whether violations reach anyone (the dashboard's checklist
ticks "set up alerts" by it), as the violations service's delivery settings say; admins only.
(tests/e2e/test_delivery_flow.py sees it flip when an admin saves an SMTP server.)"""

from __future__ import annotations

from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from services.gateway.app import create_app
from services.gateway.auth import TokenIssuer
from services.notifications import api as notifications_api
from services.shared.bus.inproc import InProcessBus
from services.shared.config import AuthSettings, GatewaySettings, Settings

SECRET = "s" * 40
SETTINGS = Settings(
    auth=AuthSettings(jwt_secret=SECRET),
    gateway=GatewaySettings(frontend_dir="/nonexistent"),
    dev=True,
)


def bearer(username: str, *, admin: bool) -> dict[str, str]:
    roles = ["user", "admin"] if admin else ["user"]
    token = TokenIssuer(SECRET, 900).access_token({"username": username, "roles": roles})
    return {"Authorization": f"Bearer {token}"}


async def serve_delivery(bus: InProcessBus, *, reaches_nobody: bool) -> None:
    async def delivery_settings(_args: dict[str, Any]) -> dict[str, Any]:
        return {"reaches_nobody": reaches_nobody}

    method = notifications_api.DELIVERY_SETTINGS
    await bus.serve(method.service, {method.name: delivery_settings})


async def test_alerts_not_set_up_while_violations_reach_nobody(bus: InProcessBus) -> None:
    await serve_delivery(bus, reaches_nobody=True)
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as c:
        reply = await c.get("/api/v1/getting-started", headers=bearer("root", admin=True))
        assert reply.status == 200 and await reply.json() == {"alerts_configured": False}


async def test_alerts_set_up_once_violations_reach_someone(bus: InProcessBus) -> None:
    await serve_delivery(bus, reaches_nobody=False)
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as c:
        reply = await c.get("/api/v1/getting-started", headers=bearer("root", admin=True))
        assert await reply.json() == {"alerts_configured": True}


async def test_only_admins_may_ask(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(SETTINGS, bus))) as c:
        assert (await c.get("/api/v1/getting-started")).status == 401
        user = bearer("erin", admin=False)
        assert (await c.get("/api/v1/getting-started", headers=user)).status == 403
