"""The first run as a newcomer meets it: no administrator, no terminal (stdin is /dev/null, as
under `make run` in a script or a container). `warden init` does not ask anything, the gateway
prints a one-time set-up link, and the link's token creates the first admin through
POST /api/v1/setup, once. Real processes: `warden run all` on SQLite, then the gateway and the
reservations service apart over the real RabbitMQ (the test's own vhost).

The banner's link is found with the pattern another test would use (`LINK`). Deadlines are
generous and nothing asserts how long anything took.
"""
# ruff: noqa: F811 (the imported `fleet_factory` fixture is a test's parameter)

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import aiohttp
import pytest

from tests.e2e.test_separate_processes import (  # noqa: F401 (a fixture, taken as ours)
    START_DEADLINE_S,
    Fleet,
    fleet_factory,
)
from tests.support.polling import until

pytestmark = [pytest.mark.timeout(300)]

# The line of the gateway's banner that holds the link (services/gateway/setup_link.py).
LINK = re.compile(r"set-up link: (http://\S+/setup\?token=([A-Za-z0-9_-]+))")
ADMIN = {"username": "root1", "password": "first admin pw", "email": "root1@lab.example"}


async def printed_link(fleet: Fleet, label: str) -> tuple[str, str]:
    """(link, token) once the process `label` printed its banner."""

    def found() -> tuple[str, str] | None:
        fleet.check_running(label)
        match = LINK.search(fleet.log_path(label).read_text(errors="replace"))
        return (match.group(1), match.group(2)) if match else None

    return await until(
        found, f"{label} printing the set-up link", START_DEADLINE_S, report=fleet.logs
    )


async def call(fleet: Fleet, method: str, path: str, body: Any = None, token: str = "") -> Any:
    """(status, JSON) of one request to the gateway."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method, f"http://127.0.0.1:{fleet.port}/api/v1{path}", json=body, headers=headers
        ) as answer,
    ):
        return answer.status, await answer.json()


async def test_run_all_without_a_terminal_prints_a_link_that_creates_the_first_admin_once(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory(monitor_local_nvml="off")
    # stdin is /dev/null: a prompt would read an end of file (and `run` never returns).
    init = fleet.warden("init", label="init")
    assert init.returncode == 0, fleet.logs()
    assert "no admin yet: `warden run all` prints a one-time set-up link" in init.stdout
    fleet.start("run", "all", label="all")

    link, token = await printed_link(fleet, "all")

    assert link == f"http://127.0.0.1:{fleet.port}/setup?token={token}"
    assert await call(fleet, "GET", "/setup") == (200, {"needed": True})
    status, tokens = await call(fleet, "POST", "/setup", {"token": token, **ADMIN})
    assert status == 201, tokens
    assert tokens["user"]["roles"] == ["user", "admin"]
    status, me = await call(fleet, "GET", "/me", token=tokens["access_token"])
    assert (status, me["user"]["username"]) == (200, "root1")

    status, again = await call(fleet, "POST", "/setup", {"token": token, **ADMIN, "username": "x"})
    assert (status, again["error"]) == (409, "state_conflict")
    assert await call(fleet, "GET", "/setup") == (200, {"needed": False})
    # Signing in with the new password works as for anyone.
    login = {"username": "root1", "password": ADMIN["password"]}
    assert (await call(fleet, "POST", "/session", login))[0] == 201
    # The token was printed once, in the banner, and never logged.
    assert fleet.log_path("all").read_text(errors="replace").count(token) == 1


@pytest.mark.amqp
async def test_the_gateway_apart_prints_the_link_and_setup_link_prints_more(
    fleet_factory: Callable[..., Fleet], amqp_url: str
) -> None:
    fleet = fleet_factory(bus_amqp_url=amqp_url, monitor_local_nvml="off")
    assert fleet.warden("db", "upgrade", label="db-upgrade").returncode == 0, fleet.logs()
    # The gateway first: its banner waits for the reservations service to answer.
    fleet.start("run", "gateway", label="gateway")
    fleet.start("run", "reservations", label="reservations")
    link, banner_token = await printed_link(fleet, "gateway")
    more = fleet.warden("setup-link", label="setup-link")
    assert more.returncode == 0, fleet.logs()
    other_link = more.stdout.strip()
    other_token = other_link.rpartition("token=")[2]
    assert other_link == link.replace(banner_token, other_token)
    assert other_token != banner_token

    # A wrong token, fields that do not fit, a name or password the service refuses.
    status, wrong = await call(fleet, "POST", "/setup", {**ADMIN, "token": banner_token + "x"})
    assert (status, wrong["error"]) == (403, "forbidden")
    status, missing = await call(fleet, "POST", "/setup", {"token": banner_token})
    assert (status, missing["error"]) == (422, "validation_failed")
    short = {**ADMIN, "token": banner_token, "password": "short", "username": "Root"}
    status, refused = await call(fleet, "POST", "/setup", short)
    assert (status, refused["error"]) == (422, "validation_failed")
    assert set(refused["details"]["errors"]) == {"password", "username"}

    # The link of `warden setup-link` works as well as the banner's; then neither does.
    status, tokens = await call(fleet, "POST", "/setup", {**ADMIN, "token": other_token})
    assert status == 201, tokens
    for token in (banner_token, other_token):
        status, late = await call(fleet, "POST", "/setup", {**ADMIN, "token": token})
        assert (status, late["error"]) == (409, "state_conflict")
    no_more = fleet.warden("setup-link", label="setup-link-after")
    assert no_more.returncode == 1
    assert "an admin exists already" in no_more.stderr
    for label in ("gateway", "reservations"):
        text = fleet.log_path(label).read_text(errors="replace")
        assert "Traceback" not in text, fleet.logs()
        assert other_token not in text
