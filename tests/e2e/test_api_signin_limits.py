"""Signing in under attack and signing out for real: a parallel burst of wrong passwords stays
within the login limit, and the access tokens of a session that ended (logout, a new password)
stop working at once instead of running out their 15 minutes. One embedded system."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import PASSWORD, ApiClient, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]
DEADLINE_S = 20.0


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-signin")) as system:
        yield system


async def login(system: ApiSystem, username: str, password: str = PASSWORD) -> dict[str, Any]:
    answer = await system.anonymous().post("/session", {"username": username, "password": password})
    assert answer.status == 201, answer.body
    return dict(answer.body)


def client(system: ApiSystem, tokens: dict[str, Any]) -> ApiClient:
    return ApiClient(system.base, system.session, tokens["access_token"])


async def until_refused(who: ApiClient) -> None:
    deadline = asyncio.get_running_loop().time() + DEADLINE_S
    while (answer := await who.get("/me")).status != 401:
        assert answer.status == 200, answer.body
        if asyncio.get_running_loop().time() > deadline:
            pytest.fail(f"the access token still works {DEADLINE_S:g}s after its session ended")
        await asyncio.sleep(0.2)


async def test_a_parallel_burst_of_wrong_passwords_stays_within_the_limit(
    system: ApiSystem,
) -> None:
    limit = system.settings.gateway.login_failures_per_user
    anonymous = system.anonymous()
    answers = await asyncio.gather(
        *(anonymous.post("/session", {"username": "bob", "password": "guess"}) for _ in range(60))
    )
    statuses = Counter(answer.status for answer in answers)
    assert statuses == {401: limit, 429: 60 - limit}, statuses


async def test_after_logout_the_sessions_access_token_is_refused(system: ApiSystem) -> None:
    ended, kept = await login(system, "alice"), await login(system, "alice")
    ended_client, kept_client = client(system, ended), client(system, kept)
    assert (await ended_client.get("/me")).status == 200
    out = await ended_client.post("/session/logout", {"refresh_token": ended["refresh_token"]})
    assert out.status == 204
    refused = await ended_client.get("/me")
    assert refused.status == 401
    assert "ended" in refused.body["message"]
    assert (await kept_client.get("/me")).status == 200  # another session of alice goes on


async def test_a_new_password_ends_every_earlier_access_token(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    first, second = await login(system, "alice"), await login(system, "alice")
    changed = await admin.patch("/users/alice", {"password": "another-pw-98765"})
    assert changed.status == 200, changed.body
    await until_refused(client(system, first))
    await until_refused(client(system, second))
    fresh = client(system, await login(system, "alice", "another-pw-98765"))
    assert (await fresh.get("/me")).status == 200
