"""Signing in through the API: tokens, rotation, family revocation, logout, the login limit,
and tokens kept out of the logs. One embedded system for the module."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.api import PASSWORD, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-session")) as system:
        yield system


async def login(system: ApiSystem, username: str, password: str = PASSWORD) -> dict:
    answer = await system.anonymous().post("/session", {"username": username, "password": password})
    assert answer.status == 201, answer.body
    return dict(answer.body)


async def test_login_gives_tokens_and_me_answers_who_is_signed_in(system: ApiSystem) -> None:
    tokens = await login(system, "alice")
    assert tokens["token_type"] == "Bearer"
    assert tokens["expires_in"] == 900
    assert tokens["user"]["username"] == "alice"
    assert "password" not in str(tokens["user"])
    client = system.anonymous()
    client.token = tokens["access_token"]
    me = await client.get("/me")
    assert me.status == 200
    assert me.body["user"]["username"] == "alice"
    assert me.body["user"]["roles"] == ["user"]


async def test_wrong_password_and_unknown_user_get_the_same_401(system: ApiSystem) -> None:
    wrong = await system.anonymous().post("/session", {"username": "bob", "password": "nope"})
    unknown = await system.anonymous().post("/session", {"username": "zed", "password": "nope"})
    assert wrong.status == unknown.status == 401
    assert wrong.body["error"] == unknown.body["error"] == "authentication_failed"
    assert wrong.body["message"] == unknown.body["message"]


async def test_requests_without_or_with_a_bad_token_get_401(system: ApiSystem) -> None:
    nobody = await system.anonymous().get("/me")
    assert nobody.status == 401
    assert nobody.body["error"] == "authentication_required"
    assert nobody.headers["WWW-Authenticate"].startswith("Bearer")
    forged = system.anonymous()
    forged.token = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhZG1pbiJ9.bad"
    answer = await forged.get("/me")
    assert answer.status == 401
    assert answer.body["error"] == "authentication_failed"
    basic = await system.anonymous().request("GET", "/me", headers={"Authorization": "Basic x"})
    assert basic.status == 401


async def test_refresh_rotates_and_a_reused_token_revokes_the_family(system: ApiSystem) -> None:
    first = await login(system, "bob")
    second = await system.anonymous().post(
        "/session/refresh", {"refresh_token": first["refresh_token"]}
    )
    assert second.status == 200
    assert second.body["refresh_token"] != first["refresh_token"]
    assert second.body["user"]["username"] == "bob"
    # The first token again: someone else holds it. Both tokens of the family stop working.
    replay = await system.anonymous().post(
        "/session/refresh", {"refresh_token": first["refresh_token"]}
    )
    assert replay.status == 401
    assert replay.body["details"] == {"revoked": True}
    latest = await system.anonymous().post(
        "/session/refresh", {"refresh_token": second.body["refresh_token"]}
    )
    assert latest.status == 401
    # Another login of the same user is another family: untouched.
    other = await login(system, "bob")
    again = await system.anonymous().post(
        "/session/refresh", {"refresh_token": other["refresh_token"]}
    )
    assert again.status == 200


async def test_logout_revokes_the_refresh_token(system: ApiSystem) -> None:
    tokens = await login(system, "alice")
    out = await system.anonymous().post(
        "/session/logout", {"refresh_token": tokens["refresh_token"]}
    )
    assert out.status == 204
    after = await system.anonymous().post(
        "/session/refresh", {"refresh_token": tokens["refresh_token"]}
    )
    assert after.status == 401
    assert after.body["error"] == "authentication_failed"


async def test_failed_logins_are_limited_per_user(system: ApiSystem) -> None:
    limit = system.settings.gateway.login_failures_per_user
    for _ in range(limit):
        failed = await system.anonymous().post(
            "/session", {"username": "admin", "password": "guess"}
        )
        assert failed.status == 401
    blocked = await system.anonymous().post("/session", {"username": "admin", "password": PASSWORD})
    assert blocked.status == 429
    assert blocked.body["error"] == "too_many_attempts"
    assert int(blocked.headers["Retry-After"]) >= 1
    # Another user from the same address is not blocked (the address limit is higher).
    assert (await login(system, "alice"))["user"]["username"] == "alice"


async def test_tokens_and_passwords_never_reach_the_logs(
    system: ApiSystem, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    tokens = await login(system, "bob")
    client = system.anonymous()
    client.token = tokens["access_token"]
    await client.get("/me")
    await client.get("/reservations/999999")
    await system.anonymous().post("/session/refresh", {"refresh_token": tokens["refresh_token"]})
    logged = "\n".join(record.getMessage() for record in caplog.records)
    for secret in (tokens["access_token"], tokens["refresh_token"], PASSWORD):
        assert secret not in logged


async def test_malformed_bodies_are_400_or_422_with_the_field(system: ApiSystem) -> None:
    client = system.anonymous()
    broken = await client.request(
        "POST", "/session", headers={"Content-Type": "application/json"}, json=None
    )
    assert broken.status == 422  # an empty body: the fields are missing
    assert set(broken.body["details"]["errors"]) == {"username", "password"}
    not_json = await client.session.post(
        system.base + "/api/v1/session", data=b"{not json", headers={"Content-Type": "text/x"}
    )
    assert not_json.status == 400
    assert (await not_json.json())["error"] == "invalid_json"
    extra = await client.post("/session", {"username": "a", "password": "b", "admin": True})
    assert extra.status == 422
    assert "admin" in extra.body["details"]["errors"]
