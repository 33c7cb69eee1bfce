"""The `warden` client commands against a whole embedded Warden behind its HTTP API.

The system runs on the module's event loop; each command runs in-process
(`services.cli.main([...])`) in a worker thread, as a user would run it in a shell, with its
credentials file under the test's own XDG_CONFIG_HOME. Tests that need routes still being
written (hosts, jobs, violations) are skipped while those routes are not there.
"""

from __future__ import annotations

import asyncio
import json
import re
import stat
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from services.cli import main
from services.client.store import CredentialStore, credentials_path
from services.gateway.routes import hosts as host_routes
from services.gateway.routes import jobs as job_routes
from services.gateway.routes import violations as violation_routes
from tests.e2e.api import PASSWORD, ApiSystem, running_system
from tests.support.ports import free_port

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

needs_hosts = pytest.mark.skipif(
    not host_routes.ROUTES, reason="the hosts routes (GET /gpus) are not written yet"
)
needs_jobs = pytest.mark.skipif(not job_routes.ROUTES, reason="the jobs routes are not written yet")
needs_violations = pytest.mark.skipif(
    not violation_routes.ROUTES, reason="the violations routes are not written yet"
)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("cli-client")) as system:
        await system.gpu(0, 0)  # the reservations service knows the fleet's GPUs
        await system.gpu(1, 3)
        yield system


@dataclass
class Ran:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


class Cli:
    """`warden ...` as one user, with their own credentials file."""

    def __init__(
        self,
        system: ApiSystem,
        tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str],
    ) -> None:
        self.system, self.tmp_path = system, tmp_path
        self.monkeypatch, self.capsys = monkeypatch, capsys
        monkeypatch.setenv("HOME", str(tmp_path / "home"))
        monkeypatch.delenv("WARDEN_SERVER", raising=False)
        monkeypatch.setenv("WARDEN_PASSWORD", PASSWORD)
        self.as_user("alice")

    def as_user(self, username: str) -> None:
        """Switch to `username`'s own config folder (signed in or not)."""
        self.monkeypatch.setenv("XDG_CONFIG_HOME", str(self.tmp_path / f"xdg-{username}"))

    async def __call__(self, *argv: str) -> Ran:
        self.capsys.readouterr()
        try:
            code = await asyncio.to_thread(main, list(argv))
        except SystemExit as exit_:  # argparse: usage
            code = int(exit_.code or 0)
        captured = self.capsys.readouterr()
        return Ran(code, captured.out, captured.err)

    async def login(self, username: str = "alice") -> Ran:
        self.as_user(username)
        ran = await self("login", "--server", self.system.base, "--user", username)
        assert ran.code == 0, ran
        return ran


@pytest.fixture
def cli(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    return Cli(system, tmp_path, monkeypatch, capsys)


def reservation_id(text: str) -> int:
    found = re.search(r"reservation (\d+)", text)
    assert found, text
    return int(found[1])


async def test_login_stores_the_session_privately_and_prints_no_token(cli: Cli) -> None:
    ran = await cli.login("alice")

    assert f"signed in to {cli.system.base} as alice" in ran.out
    path = credentials_path()
    assert path == cli.tmp_path / "xdg-alice" / "warden" / "client.json"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    stored = CredentialStore(path).load()
    assert stored is not None and stored.signed_in
    assert stored.server == cli.system.base and stored.username == "alice"
    for token in (stored.access_token, stored.refresh_token):
        assert token and token not in ran.out + ran.err
        assert token not in repr(stored)


async def test_a_wrong_password_is_refused(cli: Cli) -> None:
    cli.monkeypatch.setenv("WARDEN_PASSWORD", "not-the-password")
    ran = await cli("login", "--server", cli.system.base, "--user", "bob")
    assert ran.code == 1
    assert ran.err.startswith("warden: ")
    assert not credentials_path().exists()


async def test_commands_need_a_login(cli: Cli) -> None:
    ran = await cli("reservations")
    assert ran.code == 1
    assert "not signed in" in ran.err and "warden login" in ran.err


@needs_hosts
async def test_status_shows_the_gpus_and_who_runs_what(cli: Cli) -> None:
    fleet = cli.system.fleet
    host = fleet.hosts[1]
    pid = fleet.start_process(host, 1, "carol", "python train.py")
    await cli.login()

    async def shown() -> Ran | None:
        ran = await cli("status")
        return ran if f"carol:python train.py({pid})" in ran.out else None

    ran = await cli.system.until(shown, "the process in `warden status`")
    assert ran.code == 0
    for name in fleet.hosts:
        assert name in ran.out
    data = (await cli("status", "--json")).json()
    assert len(data["gpus"]) == len(fleet.hosts) * 4
    only = (await cli("status", "--host", host, "--json")).json()
    assert {gpu["host"] for gpu in only["gpus"]} == {host}


async def listed(cli: Cli, *options: str) -> set[int]:
    ran = await cli("reservations", "--json", *options)
    assert ran.code == 0, ran
    return {item["id"] for item in ran.json()["items"]}


async def until_listed(cli: Cli, reservation: int, *options: str, present: bool = True) -> None:
    """`warden reservations` reads the gateway's calendar copy, which follows the reservation
    events: a change shows there a moment after the answer to the change."""

    async def seen() -> bool:
        return (reservation in await listed(cli, *options)) is present

    await cli.system.until(seen, f"reservation {reservation} {'' if present else 'not '}listed")


async def test_reserve_list_conflict_and_cancel(cli: Cli) -> None:
    host = cli.system.fleet.hosts[0]
    await cli.login("alice")

    booked = await cli("reserve", f"{host}:0", f"{host}:1", "--duration", "2h", "--title", "rn50")
    assert booked.code == 0, booked
    first = reservation_id(booked.out)
    assert f"{host}:0, {host}:1" in booked.out

    await until_listed(cli, first)
    table = await cli("reservations")
    assert "rn50" in table.out and str(first) in table.out

    await cli.login("bob")
    refused = await cli("reserve", f"{host}:0,1", "--start", "+30m", "--duration", "1h")
    assert refused.code == 1
    assert refused.out == ""
    assert "refused" in refused.err
    assert "is reserved by alice" in refused.err
    assert f"(reservation {first})" in refused.err
    await until_listed(cli, first, "--all-users")
    assert first not in await listed(cli)  # bob's own: none
    not_yours = await cli("cancel", str(first))
    assert not_yours.code == 1

    cli.as_user("alice")
    ended = await cli("cancel", str(first), "--reason", "done early")  # it has started
    assert ended.code == 0, ended
    assert f"ended reservation {first}" in ended.out
    await until_listed(cli, first, present=False)


async def test_reserve_any_free_gpu_with_count(cli: Cli) -> None:
    host = cli.system.fleet.hosts[0]
    await cli.login("alice")

    ran = await cli(
        "reserve", "--count", "1", "--host", host, "--start", "+3h", "--duration", "1h", "--json"
    )

    assert ran.code == 0, ran
    created = ran.json()
    assert len(created["gpus"]) == 1 and created["gpus"][0]["host"] == host
    assert created["owner"] == "alice" and created["title"] == "reserved from the CLI"
    await until_listed(cli, created["id"])

    cancelled = await cli("cancel", str(created["id"]), "--reason", "plans changed")

    assert cancelled.code == 0, cancelled
    assert f"cancelled reservation {created['id']}" in cancelled.out
    await until_listed(cli, created["id"], present=False)


async def test_usage_errors_exit_2(cli: Cli) -> None:
    await cli.login("alice")
    assert (await cli("reserve", "--duration", "2h")).code == 2  # no GPUs nor --count
    assert (await cli("reserve", "x:0", "--duration", "2 fortnights")).code == 2
    assert (await cli("reserve", "x:0")).code == 2  # neither --end nor --duration


async def test_an_expired_or_invalid_access_token_is_refreshed(cli: Cli) -> None:
    await cli.login("alice")
    store = CredentialStore()
    before = store.load()
    assert before is not None
    old_refresh = before.refresh_token
    before.access_token = "garbage.garbage.garbage"
    store.save(before)

    ran = await cli("reservations", "--json")

    assert ran.code == 0, ran
    after = store.load()
    assert after is not None
    assert after.access_token != "garbage.garbage.garbage"
    assert after.refresh_token != old_refresh  # the rotated one is kept
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    again = await cli("reservations", "--json")  # the stored new tokens work
    assert again.code == 0


async def test_a_revoked_session_asks_to_log_in_again(cli: Cli) -> None:
    await cli.login("alice")
    store = CredentialStore()
    stored = store.load()
    assert stored is not None
    await cli.system.anonymous().post("/session/logout", {"refresh_token": stored.refresh_token})
    stored.access_token = "expired"
    store.save(stored)

    ran = await cli("reservations")

    assert ran.code == 1
    assert "warden login" in ran.err


async def test_logout_revokes_and_forgets_the_session(cli: Cli) -> None:
    await cli.login("alice")
    stored = CredentialStore().load()
    assert stored is not None

    ran = await cli("logout")

    assert ran.code == 0, ran
    assert not credentials_path().exists()
    refused = await cli.system.anonymous().post(
        "/session/refresh", {"refresh_token": stored.refresh_token}
    )
    assert refused.status == 401
    assert (await cli("reservations")).code == 1


async def test_an_unreachable_server_is_said_plainly(cli: Cli) -> None:
    await cli.login("alice")
    nowhere = f"http://127.0.0.1:{free_port()}"
    cli.monkeypatch.setenv("WARDEN_SERVER", nowhere)

    ran = await cli("reservations")

    assert ran.code == 1
    assert f"cannot reach the Warden server at {nowhere}" in ran.err
    assert "warden login --server URL" in ran.err


@needs_jobs
async def test_submit_list_logs_and_stop_a_job(cli: Cli) -> None:
    host = cli.system.fleet.hosts[1]
    await cli.login("alice")
    definition = {
        "name": "cli-sleep",
        "tasks": [{"host": host, "command": "sleep 30", "gpus": [3]}],
    }
    path = cli.tmp_path / "job.json"
    path.write_text(json.dumps(definition))

    submitted = await cli("submit", str(path), "--start", "--json")

    assert submitted.code == 0, submitted
    job_id = submitted.json()["id"]

    async def running() -> dict[str, Any] | None:
        listed = (await cli("jobs", "--mine", "--json")).json()
        jobs = {job["id"]: job for job in listed["items"]}
        assert job_id in jobs
        return jobs[job_id] if jobs[job_id]["status"] == "running" else None

    await cli.system.until(running, "the job running")
    table = await cli("jobs")
    assert table.code == 0 and "cli-sleep" in table.out
    logs = await cli("logs", str(job_id))
    assert logs.code == 0, logs
    assert logs.out.strip()

    stopped = await cli("stop", str(job_id))
    assert stopped.code == 0, stopped

    async def ended() -> bool:
        listed = (await cli("jobs", "--json")).json()
        return any(j["id"] == job_id and j["status"] == "stopped" for j in listed["items"])

    await cli.system.until(ended, "the job stopped")


async def test_submit_a_file_that_is_not_a_definition(cli: Cli) -> None:
    await cli.login("alice")
    path = cli.tmp_path / "job.toml"
    path.write_text("name = [unclosed")
    ran = await cli("submit", str(path))
    assert ran.code == 2
    assert "TOML" in ran.err


@needs_violations
async def test_violations_answer(cli: Cli) -> None:
    await cli.login("alice")
    ran = await cli("violations", "--json")
    assert ran.code == 0, ran
    assert isinstance(ran.json()["items"], list)
    table = await cli("violations", "--open")
    assert table.code == 0


async def test_notifications_are_shown_changed_tested_and_listed(cli: Cli) -> None:
    await cli.login("bob")
    shown = await cli("notifications")
    assert shown.code == 0 and "job_failed" in shown.out and "10 min before a start" in shown.out
    url = "https://hooks.slack.com/services/T0/B0/SECRETxyz9"
    changed = await cli(
        "notifications", "--set", "job_finished=email,browser", "--start-lead", "15",
        "--chat-url", url, "--chat-format", "slack", "--json",
    )  # fmt: skip
    assert changed.code == 0, changed
    prefs = changed.json()
    assert {"kind": "job_finished", "email": True, "chat": False, "browser": True} in prefs["kinds"]
    assert prefs["start_lead_min"] == 15 and "SECRET" not in changed.out
    bad = await cli("notifications", "--set", "job_finished=pager")
    assert bad.code == 2
    tested = await cli("notifications", "--test", "reservation_starting")
    assert tested.code == 0 and "browser: sent" in tested.out
    sent = await cli("notifications", "--sent", "--json")
    assert "Warden test notification" in [item["title"] for item in sent.json()["items"]]
    assert (await cli("notifications", "--no-chat", "--json")).json()["chat_handle"] is None
