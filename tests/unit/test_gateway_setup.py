"""The first run at the gateway: the set-up banner (its link and when it is printed) and the
/api/v1/setup routes' own work (the rate limit, errors as the API's statuses). The reservations
side is a handler table on the in-process bus here; tests/e2e/test_first_run.py runs the real
service."""

from __future__ import annotations

import asyncio
import io
import re
from typing import Any

from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.gateway import setup_link
from services.gateway.app import create_app
from services.shared.bus.inproc import InProcessBus
from services.shared.config import GatewaySettings, Settings
from services.shared.errors import Forbidden, InvalidRequest, StateConflict
from tests.support.attempts_double import FakeAttempts

Client = TestClient[web.Request, web.Application]
# How tests (and the newcomer's browser test) find the link in the gateway's output.
LINK = re.compile(r"set-up link: (http://\S+/setup\?token=[A-Za-z0-9_-]+)")


# --- the banner ---------------------------------------------------------------------------------


def test_the_link_names_loopback_for_a_wildcard_address_and_brackets_ipv6() -> None:
    assert setup_link.setup_url("0.0.0.0", 8080, "t") == "http://127.0.0.1:8080/setup?token=t"
    assert setup_link.setup_url("::", 80, "t").startswith("http://127.0.0.1:80/")
    assert setup_link.setup_url("::1", 8080, "t").startswith("http://[::1]:8080/setup")
    assert setup_link.setup_url("head.lab", 9000, "t").startswith("http://head.lab:9000/")
    assert setup_link.setup_url("127.0.0.1", 8080, "a b/c") == (
        "http://127.0.0.1:8080/setup?token=a%20b%2Fc"
    )


def test_the_banner_holds_the_link_on_its_own_line_and_says_how_to_get_another() -> None:
    url = setup_link.setup_url("127.0.0.1", 8080, "Abc_-9")
    text = setup_link.banner(url)
    found = LINK.findall(text)
    assert found == [url]
    assert f"\n{setup_link.LINK_PREFIX}{url}\n" in text
    assert "warden setup-link" in text
    assert "warden user add NAME --email E --admin" in text


async def test_the_banner_waits_for_the_reservations_service_then_prints_once(
    bus: InProcessBus,
) -> None:
    asked: list[int] = []

    async def issue(_args: dict[str, Any]) -> dict[str, Any]:
        asked.append(1)
        return {"token": "tok-1"}

    out = io.StringIO()
    # Nobody serves the method yet: announce keeps asking (ServiceUnavailable) until it is.
    announcing = asyncio.create_task(setup_link.announce(bus, "0.0.0.0", 8123, out, 0.05))
    await asyncio.sleep(0.2)
    assert not announcing.done()
    assert out.getvalue() == ""
    await bus.serve("reservations", {"issue_setup_token": issue})
    assert await asyncio.wait_for(announcing, 30) is True
    assert LINK.findall(out.getvalue()) == ["http://127.0.0.1:8123/setup?token=tok-1"]
    assert asked == [1]


async def test_no_banner_once_an_admin_exists(bus: InProcessBus) -> None:
    async def issue(_args: dict[str, Any]) -> dict[str, Any]:
        return {"token": None}

    await bus.serve("reservations", {"issue_setup_token": issue})
    out = io.StringIO()
    assert await setup_link.announce(bus, "127.0.0.1", 8080, out) is False
    assert out.getvalue() == ""


# --- the routes ---------------------------------------------------------------------------------


def settings(**gateway: object) -> Settings:
    return Settings(gateway=GatewaySettings(**gateway), dev=True)  # type: ignore[arg-type]


BODY = {"token": "t", "username": "root1", "password": "long enough"}


async def test_wrong_tokens_are_limited_per_address_and_other_refusals_are_not(
    bus: InProcessBus,
) -> None:
    outcome: dict[str, Exception] = {"error": Forbidden("the set-up token is not valid")}

    async def setup_admin(_args: dict[str, Any]) -> dict[str, Any]:
        raise outcome["error"]

    await FakeAttempts().serve(bus, setup_admin=setup_admin)
    app = create_app(settings(login_failures_per_ip=2, frontend_dir="/nonexistent"), bus)
    async with TestClient(TestServer(app)) as client:
        outcome["error"] = StateConflict("the first administrator exists already")
        for _ in range(3):  # not a guess at the token: never counted
            assert (await client.post("/api/v1/setup", json=BODY)).status == 409
        outcome["error"] = InvalidRequest("invalid user", {"password": "must be longer"})
        refused = await client.post("/api/v1/setup", json=BODY)
        assert refused.status == 422
        assert (await refused.json())["details"]["errors"] == {"password": ["must be longer"]}
        outcome["error"] = Forbidden("the set-up token is not valid")
        assert (await client.post("/api/v1/setup", json=BODY)).status == 403
        assert (await client.post("/api/v1/setup", json=BODY)).status == 403
        limited = await client.post("/api/v1/setup", json=BODY)
        assert limited.status == 429
        assert (await limited.json())["error"] == "too_many_attempts"
        assert int(limited.headers["Retry-After"]) >= 1


async def test_bodies_that_do_not_fit_are_422_before_the_service_is_asked(
    bus: InProcessBus,
) -> None:
    asked: list[dict[str, Any]] = []

    async def setup_admin(args: dict[str, Any]) -> dict[str, Any]:
        asked.append(args)
        raise Forbidden("no")

    await FakeAttempts().serve(bus, setup_admin=setup_admin)
    async with TestClient(TestServer(create_app(settings(frontend_dir="/x"), bus))) as client:
        for body in ({}, {**BODY, "token": ""}, {**BODY, "username": 5}, {"token": "t"}):
            answer = await client.post("/api/v1/setup", json=body)
            assert answer.status == 422, body
            assert (await answer.json())["error"] == "validation_failed"
        bad_json = await client.post("/api/v1/setup", data=b"{nope")
        assert bad_json.status == 400
    assert asked == []


async def test_the_new_admin_is_signed_in_and_the_email_defaults_to_localhost(
    bus: InProcessBus,
) -> None:
    asked: list[dict[str, Any]] = []
    user = {
        "username": "root1",
        "email": "root1@localhost",
        "roles": ["user", "admin"],
        "groups": [],
        "created_at": "2026-11-24T20:00:00+00:00",
    }

    async def setup_admin(args: dict[str, Any]) -> dict[str, Any]:
        asked.append(args)
        return {
            "user": user,
            "refresh_token": "r",
            "refresh_expires_at": "2026-12-24T20:00:00+00:00",
            "session": "s",
        }

    await FakeAttempts().serve(bus, setup_admin=setup_admin)
    async with TestClient(TestServer(create_app(settings(frontend_dir="/x"), bus))) as client:
        answer = await client.post("/api/v1/setup", json=BODY)
        assert answer.status == 201
        tokens = await answer.json()
        me = await client.get(
            "/api/v1/me", headers={"Authorization": f"Bearer {tokens['access_token']}"}
        )
        assert me.status != 401  # the access token is this gateway's own (get_user is not served)
    assert tokens["user"] == user
    assert tokens["refresh_token"] == "r"
    assert asked[0]["email"] == "root1@localhost"
    assert asked[0]["token"] == "t"
    assert asked[0]["ttl_s"] == Settings().auth.refresh_token_ttl_s
