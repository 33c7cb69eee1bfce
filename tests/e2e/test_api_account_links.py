"""Accounts people run themselves, through the API: invitations and resets as one-time links,
a password an admin chose asked to be changed, deactivation and deletion signing people out at
once, and who may do each. One embedded system for the module.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import PASSWORD, ApiClient, ApiSystem, Response, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

_names = itertools.count()


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-account-links")) as system:
        yield system


def refused(answer: Response, status: int, code: str) -> None:
    assert answer.status == status, answer.body
    assert answer.body["error"] == code, answer.body


def token_of(link: str) -> str:
    return link.rsplit("/password/", 1)[1]


async def signed_in(system: ApiSystem, username: str, password: str) -> ApiClient:
    login = await system.anonymous().post("/session", {"username": username, "password": password})
    assert login.status == 201, login.body
    return ApiClient(system.base, system.session, login.body["access_token"])


async def made_user(system: ApiSystem, password: str = PASSWORD) -> str:
    """A new account whose owner chose their password with an invitation link."""
    admin = await system.as_user("admin")
    username = f"member{next(_names)}"
    invited = await admin.post(
        "/users/invites", {"username": username, "email": f"{username}@lab.example"}
    )
    assert invited.status == 201, invited.body
    chosen = await system.anonymous().post(
        f"/password-links/{invited.body['token']}", {"password": password}
    )
    assert chosen.status == 201, chosen.body
    return username


async def test_an_invited_person_chooses_their_password_once(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    invited = await admin.post("/users/invites", {"username": "ines", "email": "ines@lab.example"})
    assert invited.status == 201, invited.body
    assert invited.body["username"] == "ines"
    assert invited.body["purpose"] == "invite"
    assert invited.body["link"].endswith("/password/" + invited.body["token"])
    token = invited.body["token"]
    listed = await admin.get("/users/ines")
    assert listed.body["status"] == "invited"
    # Nobody signs in as an invited account, whatever they type.
    refused(
        await system.anonymous().post("/session", {"username": "ines", "password": "!invited"}),
        401,
        "authentication_failed",
    )
    again = await admin.post("/users/invites", {"username": "ines", "email": "i@lab.example"})
    refused(again, 409, "already_exists")

    anonymous = system.anonymous()
    state = await anonymous.get(f"/password-links/{token}")
    assert state.status == 200, state.body
    assert state.body["username"] == "ines"
    assert state.body["purpose"] == "invite"
    short = await anonymous.post(f"/password-links/{token}", {"password": "short"})
    refused(short, 400, "invalid_request")  # and the link is kept
    chosen = await anonymous.post(f"/password-links/{token}", {"password": "ines-own-pw"})
    assert chosen.status == 201, chosen.body
    assert chosen.body["user"]["username"] == "ines"
    assert chosen.body["user"]["status"] == "active"
    assert chosen.body["user"]["change_at_sign_in"] is False
    reused = await anonymous.post(f"/password-links/{token}", {"password": "someone-else"})
    refused(reused, 403, "forbidden")
    refused(await anonymous.get(f"/password-links/{token}"), 403, "forbidden")
    ines = await signed_in(system, "ines", "ines-own-pw")
    assert (await ines.get("/me")).body["user"]["username"] == "ines"


async def test_a_password_an_admin_chose_is_to_be_changed_before_anything_else(
    system: ApiSystem,
) -> None:
    admin = await system.as_user("admin")
    made = await admin.post(
        "/users", {"username": "chosen", "email": "chosen@lab.example", "password": PASSWORD}
    )
    assert made.status == 201, made.body
    assert made.body["change_at_sign_in"] is True
    login = await system.anonymous().post("/session", {"username": "chosen", "password": PASSWORD})
    assert login.body["user"]["change_at_sign_in"] is True
    member = ApiClient(system.base, system.session, login.body["access_token"])
    # Only who they are and their password, until they choose one.
    assert (await member.get("/me")).status == 200
    assert (await member.get("/users/chosen")).status == 200
    first = await member.get("/reservations")
    refused(first, 403, "forbidden")
    assert "choose your own" in first.body["message"]
    changed = await member.patch("/users/chosen", {"password": "my-own-choice"})
    assert changed.status == 200, changed.body
    assert changed.body["change_at_sign_in"] is False
    member = await signed_in(system, "chosen", "my-own-choice")
    assert (await member.get("/reservations")).status == 200
    # An admin choosing it again asks again.
    again = await admin.patch("/users/chosen", {"password": "admin-choice"})
    assert again.body["change_at_sign_in"] is True


async def test_a_changed_password_refuses_the_old_access_token_at_once(system: ApiSystem) -> None:
    username = await made_user(system)
    member = await signed_in(system, username, PASSWORD)
    assert (await member.get("/me")).status == 200
    admin = await system.as_user("admin")
    changed = await admin.patch(f"/users/{username}", {"password": "another-password"})
    assert changed.status == 200, changed.body
    # Asked right after the answer: no wait for the revocation to travel.
    refused(await member.get("/me"), 401, "authentication_failed")


async def test_a_reset_gives_a_new_link_and_ends_the_old_sessions(system: ApiSystem) -> None:
    username = await made_user(system)
    member = await signed_in(system, username, PASSWORD)
    admin = await system.as_user("admin")
    first = await admin.post(f"/users/{username}/reset")
    assert first.status == 201, first.body
    second = await admin.post(f"/users/{username}/reset")
    assert second.body["purpose"] == "reset"
    # The earlier link stops working; the old password works until the new link is used.
    refused(
        await system.anonymous().get(f"/password-links/{first.body['token']}"), 403, "forbidden"
    )
    assert (await member.get("/me")).status == 200
    chosen = await system.anonymous().post(
        f"/password-links/{second.body['token']}", {"password": "after-reset"}
    )
    assert chosen.status == 201, chosen.body
    refused(await member.get("/me"), 401, "authentication_failed")
    old = await system.anonymous().post("/session", {"username": username, "password": PASSWORD})
    refused(old, 401, "authentication_failed")
    await signed_in(system, username, "after-reset")
    refused(await admin.post("/users/nobody-here/reset"), 404, "not_found")


async def _future_booking(system: ApiSystem, client: ApiClient) -> int:
    gpu = await system.gpu(1, 3)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=3)
    made = await client.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 30, "title": "t"},
    )
    assert made.status == 201, made.body
    return int(made.body["id"])


async def test_deactivation_signs_out_at_once_and_frees_bookings_when_asked(
    system: ApiSystem,
) -> None:
    username = await made_user(system)
    member = await signed_in(system, username, PASSWORD)
    login = await system.anonymous().post("/session", {"username": username, "password": PASSWORD})
    booking = await _future_booking(system, member)
    admin = await system.as_user("admin")

    gone = await admin.post(f"/users/{username}/deactivate", {"free_bookings": True})
    assert gone.status == 200, gone.body
    assert gone.body["user"]["status"] == "deactivated"
    assert gone.body["cancelled"] == [booking]
    refused(await member.get("/me"), 401, "authentication_failed")
    refresh = await system.anonymous().post(
        "/session/refresh", {"refresh_token": login.body["refresh_token"]}
    )
    assert refresh.status == 401, refresh.body
    again = await system.anonymous().post("/session", {"username": username, "password": PASSWORD})
    refused(again, 403, "forbidden")
    assert "deactivated" in again.body["message"]
    kept = await admin.get(f"/reservations/{booking}")
    assert kept.body["status"] == "cancelled"  # cancelled, not deleted: history kept
    refused(await admin.post(f"/users/{username}/reset"), 409, "state_conflict")

    back = await admin.post(f"/users/{username}/activate")
    assert back.status == 200, back.body
    assert back.body["status"] == "active"
    await signed_in(system, username, PASSWORD)


async def test_deactivation_keeps_bookings_unless_asked(system: ApiSystem) -> None:
    username = await made_user(system)
    member = await signed_in(system, username, PASSWORD)
    gpu = await system.gpu(0, 3)
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=4)
    made = await member.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 30, "title": "t"},
    )
    assert made.status == 201, made.body
    admin = await system.as_user("admin")
    gone = await admin.post(f"/users/{username}/deactivate", {})
    assert gone.body["cancelled"] == []
    assert (await admin.get(f"/reservations/{made.body['id']}")).body["status"] != "cancelled"


async def test_delete_asks_for_the_username_and_signs_out(system: ApiSystem) -> None:
    username = await made_user(system)
    member = await signed_in(system, username, PASSWORD)
    admin = await system.as_user("admin")
    refused(await admin.delete(f"/users/{username}"), 422, "validation_failed")
    refused(await admin.delete(f"/users/{username}", confirm="someone"), 400, "invalid_request")
    deleted = await admin.delete(f"/users/{username}", confirm=username)
    assert deleted.status == 200, deleted.body
    assert deleted.body == {"username": username, "deleted": True}
    refused(await member.get("/me"), 401, "authentication_failed")
    refused(await admin.get(f"/users/{username}"), 404, "not_found")
    refused(await admin.delete(f"/users/{username}", confirm=username), 404, "not_found")


async def test_nobody_ends_their_own_account(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    refused(await admin.post("/users/admin/deactivate", {}), 400, "invalid_request")
    refused(await admin.delete("/users/admin", confirm="admin"), 400, "invalid_request")


async def test_users_are_refused_the_admin_actions(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    calls: list[tuple[str, str, Any]] = [
        ("POST", "/users/invites", {"username": "zed", "email": "z@lab.example"}),
        ("POST", "/users/bob/reset", None),
        ("POST", "/users/bob/deactivate", {}),
        ("POST", "/users/bob/activate", None),
        ("DELETE", "/users/bob?confirm=bob", None),
    ]
    for method, path, body in calls:
        refused(await alice.request(method, path, json=body), 403, "forbidden")
        refused(
            await system.anonymous().request(method, path, json=body),
            401,
            "authentication_required",
        )
    assert (await alice.get("/me")).status == 200  # nothing happened to bob nor to her
