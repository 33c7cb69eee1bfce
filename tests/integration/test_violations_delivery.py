"""E-mail and chat delivery set on the Settings page (the violations service's RPC), with a real
SMTP server (aiosmtpd) and a real HTTP receiver: nothing set up means each step is recorded as
skipped at once (never pending), and what an admin saves holds from the next step on, with no
restart and nothing in the configuration file.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from email.policy import default as email_policy
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web
from aiosmtpd.controller import Controller

from services.shared.bus.inproc import InProcessBus
from services.shared.errors import InvalidRequest
from services.shared.storage import db
from tests.integration.test_violations_service import Running, settings_for
from tests.support.events import record
from tests.support.mailbox import Mailbox
from tests.support.ports import free_port

ADDRESSES = {"alice": "alice@lab.example", "bob": "bob@lab.example"}
STEPS = "0s webhook owner+admins, 0s email offender+owner"
PASSWORD = "smtp-pass-0f9e"


class Chat:
    """A chat service's webhook: records each POST's path and JSON body."""

    def __init__(self) -> None:
        self.posts: list[tuple[str, Any]] = []
        self.base = ""

    async def handle(self, request: web.Request) -> web.Response:
        self.posts.append((request.path, await request.json()))
        return web.Response(text="ok")


@pytest.fixture
async def chat() -> AsyncIterator[Chat]:
    received = Chat()
    app = web.Application()
    app.router.add_post("/{tail:.*}", received.handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    host, port = runner.addresses[0][:2]
    received.base = f"http://{host}:{port}"
    try:
        yield received
    finally:
        await runner.cleanup()


@pytest.fixture
def mailbox() -> Any:
    box = Mailbox(email_policy)
    controller = Controller(box, hostname="127.0.0.1", port=free_port())
    controller.start()
    try:
        yield box, controller.port
    finally:
        controller.stop()


async def _contacts(args: dict[str, Any]) -> dict[str, Any]:
    users = {name: {"email": ADDRESSES.get(name), "role": "user"} for name in args["usernames"]}
    return {"users": users, "admins": []}


async def _nothing(_args: dict[str, Any]) -> list[Any]:
    return []


@pytest.fixture
async def service(tmp_path: Path) -> AsyncIterator[Running]:
    url = f"sqlite+aiosqlite:///{tmp_path}/violations.db"
    engine = db.create_engine(url)
    await db.upgrade(engine, "violations")
    await engine.dispose()
    bus = InProcessBus()
    await bus.start()
    await bus.serve(
        "reservations", {"calendar": _nothing, "list_gpus": _nothing, "contacts": _contacts}
    )
    running = Running(bus, settings_for(url, tmp_path, handlers="webhook,email", steps=STEPS))
    await record(bus, running.events, "violations")
    await running.start()
    try:
        yield running
    finally:
        assert running.stop is not None
        await running.stop()
        await bus.close()


async def _incident(service: Running, offender: str, rid: int) -> dict[str, Any]:
    """A squat of `offender` on alice's reservation `rid`, once both steps reported."""
    before = len(service.of("violation.opened"))
    await service.reserve(rid=rid)
    await service.observe((100 + rid, offender))
    await service.until(lambda: len(service.of("violation.opened")) > before, "opened")
    incident_id = service.of("violation.opened")[-1]["incident_id"]
    found: dict[str, Any] = {}

    async def reported() -> bool:
        found.update(await service.call("get_incident", id=incident_id))
        handlers = {e["handler"] for e in found["timeline"] if e["kind"] == "action"}
        return handlers == {"webhook", "email"}

    await service.until(reported, "both steps reported")
    return found


async def test_nothing_set_up_each_step_is_skipped_with_why(service: Running) -> None:
    settings = await service.call("delivery_settings")
    assert settings["reaches_nobody"] is True
    assert (settings["smtp"]["source"], settings["webhooks"]["source"]) == ("none", "none")

    incident = await _incident(service, "bob", 7)
    actions = [e for e in incident["timeline"] if e["kind"] == "action"]
    assert {(e["handler"], e["ok"]) for e in actions} == {("webhook", None), ("email", None)}
    assert any("no chat webhook is set up" in e["detail"] for e in actions)
    assert any("e-mail is not set up" in e["detail"] for e in actions)
    assert incident["last_step"]["outcome"] == "skipped"
    [listed] = (await service.call("list_incidents"))["incidents"]
    assert listed["last_step"]["outcome"] == "skipped"


async def test_what_an_admin_saves_reaches_people_without_a_restart(
    service: Running, chat: Chat, mailbox: Any
) -> None:
    box, smtp_port = mailbox
    hook = f"{chat.base}/services/T0/B0/tok-{PASSWORD}"
    saved = await service.call(
        "set_delivery_settings",
        by="root",
        smtp={
            "host": "127.0.0.1",
            "port": smtp_port,
            "security": "none",
            "username": "",
            "password": PASSWORD,
            "mail_from": "warden@lab.example",
        },
        webhooks=[{"name": "lab-chat", "format": "slack", "url": hook}],
    )
    assert saved["reaches_nobody"] is False
    assert saved["smtp"]["source"] == "settings" and saved["smtp"]["password_set"] is True
    assert saved["webhooks"]["targets"][0]["url_hint"] == f"{chat.base.split(':')[0]}://127.0.0.1/…"
    assert PASSWORD not in json.dumps(saved)
    assert PASSWORD not in json.dumps(await service.call("delivery_settings"))

    tested = await service.call("test_delivery", by="root", channel="email", to="root@lab.example")
    assert [o["ok"] for o in tested["outcomes"]] == [True]
    assert box.to("root@lab.example")[0]["Subject"] == "[Warden] Warden test message"
    tested = await service.call("test_delivery", by="root", channel="webhook")
    assert [(o["target"], o["ok"]) for o in tested["outcomes"]] == [("lab-chat", True)]
    assert "Warden test message" in chat.posts[-1][1]["text"]

    incident = await _incident(service, "bob", 8)
    assert incident["last_step"]["outcome"] == "ok"
    assert box.to("bob@lab.example") and box.to("alice@lab.example")
    offender_mail = box.to("bob@lab.example")[0]
    assert "you are using a GPU reserved by alice" in offender_mail["Subject"]
    squat_posts = [body for path, body in chat.posts if "bob" in json.dumps(body)]
    assert squat_posts, chat.posts

    # Saved without the password: the saved one is kept; null forgets the saved webhooks.
    kept = await service.call(
        "set_delivery_settings",
        by="root",
        smtp={"host": "127.0.0.1", "port": smtp_port, "mail_from": "w@lab.example"},
        webhooks=None,
    )
    assert kept["smtp"]["password_set"] is True
    assert kept["webhooks"] == {"source": "none", "targets": []}


async def test_bad_settings_are_refused_with_why(service: Running) -> None:
    with pytest.raises(InvalidRequest):
        await service.call("set_delivery_settings", by="root", webhooks=[{"name": "x"}])
    with pytest.raises(InvalidRequest):
        await service.call(
            "set_delivery_settings",
            by="root",
            webhooks=[
                {"name": "x", "url": "http://a.example/1"},
                {"name": "x", "url": "http://a.example/2"},
            ],
        )
    with pytest.raises(InvalidRequest):
        await service.call("test_delivery", by="nobody-with-mail", channel="email")
    skipped = await service.call("test_delivery", by="root", channel="webhook")
    assert skipped["outcomes"][0]["ok"] is False
