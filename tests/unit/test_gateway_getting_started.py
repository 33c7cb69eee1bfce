"""GET /api/v1/getting-started: whether violations reach anyone (the dashboard's checklist
ticks "set up alerts" by it); admins only."""

from __future__ import annotations

from aiohttp.test_utils import TestClient, TestServer

from services.gateway.app import create_app
from services.gateway.auth import TokenIssuer
from services.shared.bus.inproc import InProcessBus
from services.shared.config import (
    AuthSettings,
    GatewaySettings,
    Settings,
    SmtpSettings,
    ViolationSettings,
    WebhookTarget,
)

SECRET = "s" * 40


def settings(violations: ViolationSettings) -> Settings:
    return Settings(
        auth=AuthSettings(jwt_secret=SECRET),
        gateway=GatewaySettings(frontend_dir="/nonexistent"),
        violations=violations,
        dev=True,
    )


def bearer(username: str, *, admin: bool) -> dict[str, str]:
    roles = ["user", "admin"] if admin else ["user"]
    token = TokenIssuer(SECRET, 900).access_token({"username": username, "roles": roles})
    return {"Authorization": f"Bearer {token}"}


async def answer(bus: InProcessBus, violations: ViolationSettings) -> dict[str, object]:
    async with TestClient(TestServer(create_app(settings(violations), bus))) as c:
        reply = await c.get("/api/v1/getting-started", headers=bearer("root", admin=True))
        assert reply.status == 200
        body: dict[str, object] = await reply.json()
        return body


async def test_alerts_count_as_set_up_with_smtp_or_a_webhook(bus: InProcessBus) -> None:
    assert await answer(bus, ViolationSettings()) == {"alerts_configured": False}
    mail = ViolationSettings(smtp=SmtpSettings(host="mail.lab.example"))
    assert await answer(bus, mail) == {"alerts_configured": True}
    chat = ViolationSettings(webhooks=(WebhookTarget(url="https://chat.lab.example/hook"),))
    assert await answer(bus, chat) == {"alerts_configured": True}


async def test_only_admins_may_ask(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(settings(ViolationSettings()), bus))) as c:
        assert (await c.get("/api/v1/getting-started")).status == 401
        user = bearer("erin", admin=False)
        assert (await c.get("/api/v1/getting-started", headers=user)).status == 403
