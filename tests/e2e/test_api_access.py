"""The authorisation matrix, route by route: every declared route is checked at its level.

- public: answers without a token;
- user: 401 without a token;
- admin: 401 without a token, 403 for a user, allowed for an admin;
- owner: 401 without a token, 403 for another user, allowed for the owner and for an admin.

A new route that is not in `OWNER_CASES` (when it is an owner route) fails the test that lists
them, so nobody adds a route without saying how its owner check is proven.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from services.gateway.routes import ROUTES
from services.gateway.routing import Access, Route
from tests.e2e.api import ApiClient, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

# Values for path parameters where only the access check matters (it comes before anything);
# none names a real thing, so an admin passing the check changes nothing.
PLACEHOLDERS = {
    "id": "999999",
    "name": "no-such-group",
    "username": "nobody",
    "index": "0",
    "token": "no-such-feed",
}


def concrete(route: Route) -> str:
    return re.sub(r"{(\w+)}", lambda m: PLACEHOLDERS[m.group(1)], route.path)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-access")) as system:
        yield system


async def test_without_a_token_only_public_routes_answer(system: ApiSystem) -> None:
    anonymous = system.anonymous()
    for route in ROUTES:
        answer = await anonymous.request(route.method, concrete(route))
        where = f"{route.method} {route.path}"
        if route.access is Access.PUBLIC:
            assert answer.status != 401 or route.path.startswith("/session"), where
        else:
            assert answer.status == 401, where
            assert answer.body["error"] == "authentication_required", where


async def test_users_get_403_on_every_admin_route_and_admins_pass(system: ApiSystem) -> None:
    alice, admin = await system.as_user("alice"), await system.as_user("admin")
    admin_routes = [route for route in ROUTES if route.access is Access.ADMIN]
    assert admin_routes
    for route in admin_routes:
        where = f"{route.method} {route.path}"
        refused = await alice.request(route.method, concrete(route), json={})
        assert refused.status == 403, where
        assert refused.body["error"] == "forbidden", where
        passed = await admin.request(route.method, concrete(route), json={})
        assert passed.status not in (401, 403), where  # 404/422 for placeholders is fine


# --- owner routes ------------------------------------------------------------------------------


@dataclass
class OwnedThing:
    path: str  # the route's path with alice's thing in it
    body: Any = None
    params: dict[str, Any] | None = None


Make = Callable[[ApiSystem], Awaitable[OwnedThing]]


_made = itertools.count()


async def _reservation(system: ApiSystem, hours_ahead: int) -> int:
    """A reservation of alice's, each on a GPU and hour of its own."""
    alice = await system.as_user("alice")
    n = next(_made)
    gpu = await system.gpu(n % 2, (n // 2) % 4)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=hours_ahead + n // 8)
    made = await alice.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 30, "title": "t"},
    )
    assert made.status == 201, made.body
    return int(made.body["id"])


async def _job(system: ApiSystem) -> int:
    alice = await system.as_user("alice")
    made = await alice.post(
        "/jobs",
        {"name": "matrix", "tasks": [{"host": system.fleet.hosts[1], "gpus": [2],
                                      "command": "exit 0"}]},
    )  # fmt: skip
    assert made.status == 201, made.body
    return int(made.body["id"])


def reservation_case(suffix: str, body: Any = None, hours: int = 30) -> Make:
    async def make(system: ApiSystem) -> OwnedThing:
        return OwnedThing(f"/reservations/{await _reservation(system, hours)}{suffix}", body)

    return make


def job_case(suffix: str, body: Any = None) -> Make:
    async def make(system: ApiSystem) -> OwnedThing:
        job_id = await _job(system)
        if callable(body):
            return OwnedThing(f"/jobs/{job_id}{suffix}", body(system))
        return OwnedThing(f"/jobs/{job_id}{suffix}", body)

    return make


def user_case(body: Any = None) -> Make:
    async def make(_system: ApiSystem) -> OwnedThing:
        return OwnedThing("/users/alice", body)

    return make


def _job_definition(system: ApiSystem) -> dict[str, Any]:
    return {"name": "renamed", "tasks": [{"host": system.fleet.hosts[1], "gpus": [2],
                                          "command": "exit 0"}]}  # fmt: skip


# (method, route path) -> how to make a thing alice owns, and what to send about it.
OWNER_CASES: dict[tuple[str, str], Make] = {
    ("PATCH", "/reservations/{id}"): reservation_case("", {"title": "mine"}),
    ("DELETE", "/reservations/{id}"): reservation_case(""),
    # Ending early is for a running reservation: alice's starts now.
    ("POST", "/reservations/{id}/end"): reservation_case("/end", hours=0),
    # Answering an idle notice: the owner and an admin pass the check (then 409: none waits).
    ("POST", "/reservations/{id}/keep"): reservation_case("/keep", hours=0),
    ("POST", "/reservations/{id}/release"): reservation_case("/release", hours=0),
    ("PUT", "/jobs/{id}"): job_case("", _job_definition),
    ("DELETE", "/jobs/{id}"): job_case(""),
    ("POST", "/jobs/{id}/start"): job_case("/start"),
    ("POST", "/jobs/{id}/stop"): job_case("/stop"),
    ("POST", "/jobs/{id}/enqueue"): job_case("/enqueue"),
    ("POST", "/jobs/{id}/dequeue"): job_case("/dequeue"),
    ("GET", "/jobs/{id}/history"): job_case("/history"),
    ("GET", "/jobs/{id}/tasks/{index}/logs"): job_case("/tasks/0/logs"),
    ("GET", "/users/{username}"): user_case(),
    ("PATCH", "/users/{username}"): user_case({"email": "alice@lab.example"}),
}
# Owner routes whose thing cannot be made here; the test named proves them.
PROVEN_ELSEWHERE = {
    ("GET", "/violations/{id}"): (
        "tests.e2e.test_api_violations",
        (
            "test_an_uninvolved_user_sees_nothing_of_it",  # 403
            "test_the_owner_sees_their_incident_in_the_list_and_in_detail",
            "test_the_offender_sees_their_incident",
            "test_admin_sees_every_incident_and_filters_them",
        ),
    ),
}


async def test_every_owner_route_has_its_case() -> None:
    owner_routes = {(r.method, r.path) for r in ROUTES if r.access is Access.OWNER}
    assert owner_routes == set(OWNER_CASES) | set(PROVEN_ELSEWHERE)
    import importlib

    for module, tests in PROVEN_ELSEWHERE.values():
        for test in tests:
            assert callable(getattr(importlib.import_module(module), test, None)), test


@pytest.mark.parametrize("key", list(OWNER_CASES), ids=lambda key: f"{key[0]} {key[1]}")
async def test_owner_routes_refuse_other_users_and_admit_owner_and_admin(
    system: ApiSystem, key: tuple[str, str]
) -> None:
    method, _ = key
    bob, alice, admin = [await system.as_user(name) for name in ("bob", "alice", "admin")]

    async def ask(client: ApiClient, thing: OwnedThing) -> Any:
        return await client.request(method, thing.path, json=thing.body, params=thing.params)

    thing = await OWNER_CASES[key](system)
    refused = await ask(bob, thing)
    assert refused.status == 403, refused.body
    assert refused.body["error"] == "forbidden"
    as_owner = await ask(alice, thing)
    assert as_owner.status not in (401, 403), as_owner.body
    other = await OWNER_CASES[key](system)
    as_admin = await ask(admin, other)
    assert as_admin.status not in (401, 403), as_admin.body


async def test_private_details_of_others_reservations_stay_private(system: ApiSystem) -> None:
    reservation_id = await _reservation(system, 40)
    alice = await system.as_user("alice")
    await alice.patch(f"/reservations/{reservation_id}", {"description": "the secret plan"})
    bob = await system.as_user("bob")
    seen = await bob.get(f"/reservations/{reservation_id}")
    assert seen.status == 200
    assert seen.body["owner"] == "alice"
    assert seen.body["description"] == ""
    listed = await bob.get("/reservations", owner="alice")
    assert "the secret plan" not in str(listed.body)
    own = await alice.get(f"/reservations/{reservation_id}")
    assert own.body["description"] == "the secret plan"
