"""E-mail and chat delivery set up by an admin, end to end, with nothing in the configuration
file and no restart: the whole system behind its HTTP API, the simulated fleet over real SSH,
a real SMTP server (aiosmtpd) and a real HTTP receiver for the chat webhook.

Fresh, nothing set up: a squat's e-mail and chat steps are skipped at once with why (never
pending), the terminal step reaches the offender's terminal through the host's management user
(group tty), and admins are told that violations reach nobody. Then an admin saves SMTP and a
Slack-style webhook (over the API, then with `warden settings`), tests both, and the next squat
reaches the owner and the offender by e-mail, the chat channel and the offender's terminal.
Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime
from email import policy
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from services.cli import main
from tests.e2e.api import PASSWORD, ApiClient, ApiSystem, running_system
from tests.support.mailbox import Mailbox
from tests.support.ports import free_port
from tests.support.webhooks import webhook_receiver

pytestmark = pytest.mark.timeout(240)

STEPS = ["0s terminal offender", "0s email offender+owner", "0s webhook offender+owner"]
HOOK_PATH = "/services/T0/B0/chat-TOKEN-5f2e"


@pytest.fixture
async def system(tmp_path: Path) -> AsyncIterator[ApiSystem]:
    config = {"violations": {"steps": STEPS}}
    async with running_system(tmp_path, hosts=1, gpus=4, config=config) as system:
        yield system


async def _squat(system: ApiSystem, gpu_index: int) -> tuple[str, str]:
    """alice reserves a GPU; bob, logged in on its host, runs a process on it. (incident, tty)"""
    alice, admin = await system.as_user("alice"), await system.as_user("admin")
    gpu = await system.gpu(0, gpu_index)
    start = datetime.now(UTC)
    made = await alice.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 60, "title": "t"},
    )
    assert made.status == 201, made.body
    host = system.fleet.hosts[0]
    tty = system.fleet.login(host, "bob")
    system.fleet.start_process(host, gpu_index, "bob", "python squat.py")

    async def opened() -> str | None:
        found = await admin.get("/violations", limit=50)
        ours = [i for i in found.body["items"] if i["gpu_index"] == gpu_index]
        return str(ours[0]["id"]) if ours else None

    return await system.until(opened, f"an incident on GPU {gpu_index}"), tty


async def _reported(admin: ApiClient, system: ApiSystem, incident_id: str) -> dict[str, Any]:
    """The incident once every one of its three steps reported."""

    async def done() -> dict[str, Any] | None:
        found = (await admin.get(f"/violations/{incident_id}")).body
        handlers = {e["handler"] for e in found["timeline"] if e["kind"] == "action"}
        return dict(found) if handlers == {"terminal", "email", "webhook"} else None

    return await system.until(done, "every step reported")


async def _cli(*argv: str) -> int:
    """`warden ARGV` in a worker thread, as a user runs it in a shell (its exit status)."""
    return await asyncio.to_thread(main, list(argv))


async def test_admins_set_up_delivery_and_a_squat_reaches_everyone(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    admin, alice = await system.as_user("admin"), await system.as_user("alice")
    assert (await alice.get("/settings/delivery")).status == 403
    fresh = await admin.get("/settings/delivery")
    assert fresh.status == 200 and fresh.body["reaches_nobody"] is True
    assert (await admin.get("/getting-started")).body == {"alerts_configured": False}

    # Nothing set up: e-mail and chat are skipped at once with why; the terminal works.
    first, tty = await _squat(system, 1)
    incident = await _reported(admin, system, first)
    outcome = {e["handler"]: e for e in incident["timeline"] if e["kind"] == "action"}
    assert outcome["terminal"]["ok"] is True
    assert outcome["email"]["ok"] is None and "e-mail is not set up" in outcome["email"]["detail"]
    assert outcome["webhook"]["ok"] is None and "no chat webhook" in outcome["webhook"]["detail"]
    assert incident["last_step"]["outcome"] == "skipped"
    assert system.fleet.tty_messages(system.fleet.hosts[0], tty)

    # An admin sets up SMTP over the API, and the chat webhook with `warden settings`.
    mailbox, chat = Mailbox(policy.default), list[dict[str, Any]]()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=free_port())
    smtp.start()
    receiver = await webhook_receiver(chat, HOOK_PATH)
    hook_url = f"http://127.0.0.1:{receiver.addresses[0][1]}{HOOK_PATH}"
    try:
        saved = await admin.put(
            "/settings/delivery",
            {
                "smtp": {
                    "host": "127.0.0.1",
                    "port": smtp.port,
                    "security": "none",
                    "mail_from": "warden@lab.example",
                }
            },
        )
        assert saved.status == 200 and saved.body["smtp"]["source"] == "settings", saved.body
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
        monkeypatch.setenv("WARDEN_PASSWORD", PASSWORD)
        assert await _cli("login", "--server", system.base, "--user", "admin") == 0
        code = await _cli("settings", "webhook-add", "lab-chat", hook_url, "--format", "slack")
        shown = capsys.readouterr().out
        assert code == 0 and "lab-chat" in shown and "TOKEN" not in shown
        assert await _cli("settings", "test", "webhook") == 0
        assert "lab-chat: sent" in capsys.readouterr().out
        assert await _cli("settings", "delivery", "--json") == 0
        shown_json = json.loads(capsys.readouterr().out)
        assert shown_json["webhooks"]["targets"][0]["name"] == "lab-chat"
        tested = await admin.post("/settings/delivery/test", {"channel": "email"})
        assert [o["ok"] for o in tested.body["outcomes"]] == [True], tested.body
        assert mailbox.to("admin@lab.example")
        answer = json.dumps((await admin.get("/settings/delivery")).body)
        assert "TOKEN" not in answer and 'reaches_nobody": false' in answer
        # the dashboard's checklist ticks "Set up alerts" by what the Settings page saved
        assert (await admin.get("/getting-started")).body == {"alerts_configured": True}

        # The next squat reaches the owner and the offender everywhere; nothing restarted.
        second, tty = await _squat(system, 2)
        incident = await _reported(admin, system, second)
        assert incident["last_step"]["outcome"] == "ok", incident["timeline"]
        for who in ("bob", "alice"):  # the offender (a step) and the owner (step, notification)
            await system.until(_mail_to(mailbox, f"{who}@lab.example"), f"mail to {who}")
        posts = [body for body in chat if "squat" in json.dumps(body) or "bob" in json.dumps(body)]
        assert posts, chat
        messages = system.fleet.tty_messages(system.fleet.hosts[0], tty)
        assert any("alice" in m for m in messages)
    finally:
        smtp.stop()
        await receiver.cleanup()


def _mail_to(mailbox: Mailbox, address: str) -> Callable[[], Awaitable[list[Any]]]:
    async def received() -> list[Any]:
        return mailbox.to(address)

    return received
