"""SSH self-signup's attempts are counted per client address by the reservations service
(`take_attempts`, here its in-memory double), like failed logins: a failed proof counts, a
refusal before any SSH or a monitor that is down does not, and at the limit the answer is 429
without asking the monitor. An in-process bus with fake reservations and monitor services."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from aiohttp.test_utils import TestClient, TestServer

from services.gateway.app import create_app
from services.shared.bus.inproc import InProcessBus
from services.shared.config import GatewaySettings, Settings
from services.shared.config.settings import AuthSettings, SshSettings
from services.shared.errors import ServiceUnavailable
from tests.support.attempts_double import FakeAttempts

BODY = {"username": "carol", "email": "carol@lab.example", "password": "long enough pw"}


async def test_failed_proofs_count_per_address_and_outages_do_not(
    bus: InProcessBus, tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"  # only its public half is read, for the signup page
    key.with_name("id_ed25519.pub").write_text(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE3i7mGfG3vH0Yx0m7wFv1mXk6cJbQ0s4cS1gYp5t1Ad warden\n"
    )
    proofs: list[dict[str, Any]] = []
    monitor_down = {"now": False}

    async def check_signup(_args: dict[str, Any]) -> dict[str, Any]:
        return {}

    async def prove_login(args: dict[str, Any]) -> dict[str, Any]:
        if monitor_down["now"]:
            raise ServiceUnavailable("no host could be reached")
        proofs.append(args)
        return {
            "proven": False,
            "outcome": "key_not_installed",
            "reason": "the key is not in authorized_keys",
            "host": "gpu1",
            "tried": ["gpu1"],
        }

    attempts = FakeAttempts()
    await attempts.serve(bus, check_signup=check_signup)
    await bus.serve("monitor", {"prove_login": prove_login})
    settings = Settings(
        gateway=GatewaySettings(login_failures_per_ip=2, frontend_dir="/nonexistent"),  # type: ignore[arg-type]
        auth=AuthSettings(ssh_signup=True),  # type: ignore[arg-type]
        ssh=SshSettings(key_file=str(key)),  # type: ignore[arg-type]
        dev=True,
    )
    async with TestClient(TestServer(create_app(settings, bus))) as client:
        monitor_down["now"] = True
        for _ in range(3):  # not the person's attempt: never counted
            assert (await client.post("/api/v1/signup", json=BODY)).status == 503
        monitor_down["now"] = False
        for _ in range(2):
            assert (await client.post("/api/v1/signup", json=BODY)).status == 403
        limited = await client.post("/api/v1/signup", json=BODY)
        assert limited.status == 429
        assert (await limited.json())["error"] == "too_many_attempts"
    assert len(proofs) == 2  # the third was refused before any SSH
    assert sorted(key for key, _ in attempts.rows.values()) == ["address:127.0.0.1"] * 2
