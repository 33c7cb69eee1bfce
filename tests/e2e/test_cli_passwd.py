"""`warden passwd` against a whole embedded Warden: the new password works, the old one does not,
and the command keeps its user signed in; `warden login` says when an admin chose the password.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from services.client.store import CredentialStore, credentials_path
from tests.e2e.api import PASSWORD, ApiSystem, running_system
from tests.e2e.test_cli_client import Cli

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("cli-passwd")) as system:
        yield system


@pytest.fixture
def cli(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    return Cli(system, tmp_path, monkeypatch, capsys)


async def test_passwd_changes_the_password_and_stays_signed_in(cli: Cli) -> None:
    admin = await cli.system.as_user("admin")
    made = await admin.post(
        "/users", {"username": "pat", "email": "pat@lab.example", "password": PASSWORD}
    )
    assert made.status == 201, made.body
    login = await cli.login("pat")
    assert "choose your own with `warden passwd`" in login.out  # an admin chose it

    cli.monkeypatch.setenv("WARDEN_NEW_PASSWORD", "pats-own-secret")
    ran = await cli("passwd")
    assert ran.code == 0, ran
    assert "password of pat changed" in ran.out
    assert "pats-own-secret" not in ran.out + ran.err
    stored = CredentialStore(credentials_path()).load()
    assert stored is not None and stored.signed_in
    status = await cli("reservations")
    assert status.code == 0, status  # the stored session works after the change

    old = await cli.system.anonymous().post("/session", {"username": "pat", "password": PASSWORD})
    assert old.status == 401
    new = await cli.system.anonymous().post(
        "/session", {"username": "pat", "password": "pats-own-secret"}
    )
    assert new.status == 201, new.body
    assert new.body["user"]["change_at_sign_in"] is False


async def test_passwd_refuses_a_short_password_and_changes_nothing(cli: Cli) -> None:
    await cli.login("alice")
    cli.monkeypatch.setenv("WARDEN_NEW_PASSWORD", "short")
    ran = await cli("passwd")
    assert ran.code == 1
    assert "at least 8 characters" in ran.err
    same = await cli.system.anonymous().post(
        "/session", {"username": "alice", "password": PASSWORD}
    )
    assert same.status == 201


async def test_passwd_needs_a_login(cli: Cli) -> None:
    cli.as_user("nobody")
    ran = await cli("passwd")
    assert ran.code == 1
    assert "warden login" in ran.err
