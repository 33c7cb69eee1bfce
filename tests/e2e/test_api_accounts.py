"""Accounts, groups and access rules through the API: who may see and change what, which rules
a user is shown, validation, and no password in any answer. One embedded system for the module.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import PASSWORD, ApiClient, ApiSystem, Response, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

RULE = {"name": "lab nights", "all_gpus": True, "timezone": "Europe/Warsaw"}


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-accounts")) as system:
        yield system


def no_password(answer: Response) -> None:
    assert "password" not in str(answer.body).lower()


def refused(answer: Response, status: int, code: str) -> None:
    assert answer.status == status, answer.body
    assert answer.body["error"] == code, answer.body
    assert isinstance(answer.body["message"], str)


async def rule_ids(client: ApiClient) -> set[int]:
    answer = await client.get("/rules")
    assert answer.status == 200, answer.body
    no_password(answer)
    return {rule["id"] for rule in answer.body}


async def test_admin_creates_a_user_who_can_then_sign_in(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    created = await admin.post(
        "/users",
        {"username": "carol", "email": "carol@lab.example", "password": "carol-pw-123"},
    )
    assert created.status == 201, created.body
    no_password(created)
    assert created.body["username"] == "carol"
    assert created.body["email"] == "carol@lab.example"
    assert created.body["roles"] == ["user"]
    assert "users" in created.body["groups"]  # every default group
    again = await admin.post(
        "/users", {"username": "carol", "email": "c@lab.example", "password": "carol-pw-123"}
    )
    refused(again, 409, "already_exists")

    login = await system.anonymous().post(
        "/session", {"username": "carol", "password": "carol-pw-123"}
    )
    assert login.status == 201, login.body
    carol = system.anonymous()
    carol.token = login.body["access_token"]
    me = await carol.get("/users/carol")
    assert me.status == 200
    assert me.body["username"] == "carol"
    no_password(me)
    # Her own password: the new one signs in, the old one does not.
    changed = await carol.patch("/users/carol", {"password": "carol-pw-456"})
    assert changed.status == 200, changed.body
    no_password(changed)
    old = await system.anonymous().post(
        "/session", {"username": "carol", "password": "carol-pw-123"}
    )
    assert old.status == 401
    new = await system.anonymous().post(
        "/session", {"username": "carol", "password": "carol-pw-456"}
    )
    assert new.status == 201


async def test_new_users_are_validated_by_the_gateway_and_the_service(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    missing = await admin.post("/users", {"username": "dave"})
    refused(missing, 422, "validation_failed")
    assert set(missing.body["details"]["errors"]) == {"email", "password"}
    extra = await admin.post(
        "/users",
        {"username": "dave", "email": "d@lab.example", "password": PASSWORD, "actor": "bob"},
    )
    refused(extra, 422, "validation_failed")
    assert "actor" in extra.body["details"]["errors"]
    not_unix = await admin.post(
        "/users", {"username": "Dave Smith", "email": "d@lab.example", "password": PASSWORD}
    )
    refused(not_unix, 400, "invalid_request")
    short = await admin.post(
        "/users", {"username": "dave", "email": "d@lab.example", "password": "short"}
    )
    refused(short, 400, "invalid_request")
    assert short.body["details"] == {"password": "must be at least 8 characters"}
    assert "short" not in str(short.body)  # the field is named, never its value
    no_group = await admin.post(
        "/users",
        {"username": "dave", "email": "d@lab.example", "password": PASSWORD, "groups": ["nope"]},
    )
    refused(no_group, 404, "not_found")
    assert (await admin.get("/users/dave")).status == 404


async def test_alice_is_refused_every_admin_route(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    before_groups = (await alice.get("/groups")).body
    attempts = [
        alice.post("/users", {"username": "eve", "email": "e@lab.example", "password": PASSWORD}),
        alice.post("/groups", {"name": "alice-club"}),
        alice.patch("/groups/users", {"description": "mine"}),
        alice.delete("/groups/users"),
        alice.put("/groups/users/members/bob"),
        alice.delete("/groups/users/members/bob"),
        alice.post("/rules", RULE),
        alice.put("/rules/1", RULE),
        alice.delete("/rules/1"),
    ]
    for attempt in attempts:
        refused(await attempt, 403, "forbidden")
    assert (await alice.get("/groups")).body == before_groups
    assert 1 in await rule_ids(await system.as_user("admin"))
    assert (await alice.get("/users/eve")).status in (403, 404)
    assert (await (await system.as_user("admin")).get("/users/eve")).status == 404


async def test_alice_reads_and_patches_her_own_email(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    mine = await alice.get("/users/alice")
    assert mine.status == 200, mine.body
    assert mine.body["username"] == "alice"
    assert mine.body["roles"] == ["user"]
    no_password(mine)
    patched = await alice.patch("/users/alice", {"email": "alice@new.example"})
    assert patched.status == 200, patched.body
    assert patched.body["email"] == "alice@new.example"
    no_password(patched)
    assert (await alice.get("/users/alice")).body["email"] == "alice@new.example"
    bad = await alice.patch("/users/alice", {"email": "not an address"})
    refused(bad, 400, "invalid_request")
    wrong_type = await alice.patch("/users/alice", {"email": 5})
    refused(wrong_type, 422, "validation_failed")


async def test_alice_cannot_read_or_patch_bob(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    refused(await alice.get("/users/bob"), 403, "forbidden")
    refused(await alice.patch("/users/bob", {"email": "bob@alice.example"}), 403, "forbidden")
    bob = await (await system.as_user("admin")).get("/users/bob")
    assert bob.status == 200
    assert bob.body["email"] != "bob@alice.example"


async def test_alice_cannot_make_herself_admin(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    refused(await alice.patch("/users/alice", {"is_admin": True}), 403, "forbidden")
    assert (await alice.get("/users/alice")).body["roles"] == ["user"]
    # An admin can, and back again; the last admin cannot be demoted.
    admin = await system.as_user("admin")
    promoted = await admin.patch("/users/bob", {"is_admin": True})
    assert promoted.status == 200, promoted.body
    assert promoted.body["roles"] == ["user", "admin"]
    demoted = await admin.patch("/users/bob", {"is_admin": False})
    assert demoted.body["roles"] == ["user"]
    refused(await admin.patch("/users/admin", {"is_admin": False}), 400, "invalid_request")


async def test_user_list_shows_others_emails_to_admins_only(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    listed = await alice.get("/users")
    assert listed.status == 200, listed.body
    names = [user["username"] for user in listed.body["items"]]
    assert {"admin", "alice", "bob"} <= set(names)
    assert listed.body["total"] == len(names)
    assert (listed.body["limit"], listed.body["offset"]) == (50, 0)
    for user in listed.body["items"]:
        assert set(user) == {"username", "roles"}
    assert "@" not in str(listed.body)
    no_password(listed)
    admin = await system.as_user("admin")
    full = await admin.get("/users")
    assert all("@" in user["email"] for user in full.body["items"])
    no_password(full)
    page = await admin.get("/users", limit=1, offset=1)
    assert page.body["total"] == full.body["total"]
    assert [user["username"] for user in page.body["items"]] == [full.body["items"][1]["username"]]
    refused(await admin.get("/users", limit=0), 422, "validation_failed")


async def test_groups_are_created_changed_and_deleted_by_admins(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    created = await admin.post("/groups", {"name": "interns", "description": "summer"})
    assert created.status == 201, created.body
    assert created.body == {
        "name": "interns",
        "description": "summer",
        "is_default": False,
        "members": [],
    }
    refused(await admin.post("/groups", {"name": "interns"}), 409, "already_exists")
    refused(await admin.post("/groups", {"name": "no spaces"}), 400, "invalid_request")
    changed = await admin.patch("/groups/interns", {"description": "all year"})
    assert changed.status == 200
    assert changed.body["description"] == "all year"
    added = await admin.put("/groups/interns/members/bob")
    assert added.status == 200, added.body
    assert added.body == {
        "group": "interns",
        "username": "bob",
        "changed": True,
        "cancelled": [],
        "restored": [],
    }
    again = await admin.put("/groups/interns/members/bob")
    assert again.body["changed"] is False
    listed = await (await system.as_user("bob")).get("/groups")
    assert listed.status == 200
    assert {"name": "interns", "members": ["bob"]}.items() <= next(
        group for group in listed.body if group["name"] == "interns"
    ).items()
    removed = await admin.delete("/groups/interns/members/bob")
    assert removed.status == 200
    assert removed.body["changed"] is True
    deleted = await admin.delete("/groups/interns")
    assert deleted.status == 200, deleted.body
    assert deleted.body == {"name": "interns", "cancelled": [], "restored": []}
    refused(await admin.delete("/groups/interns"), 404, "not_found")
    names = {group["name"] for group in (await admin.get("/groups")).body}
    assert "interns" not in names


async def test_users_see_only_the_rules_that_apply_to_them(system: ApiSystem) -> None:
    admin, alice, bob = [await system.as_user(name) for name in ("admin", "alice", "bob")]
    assert (await admin.post("/groups", {"name": "phd"})).status == 201
    member = await admin.put("/groups/phd/members/alice")
    assert member.status == 200
    assert member.body["changed"] is True
    rule = await admin.post(
        "/rules",
        {
            "name": "phd weekdays",
            "groups": ["phd"],
            "hosts": ["dgx1"],
            "timezone": "Europe/Warsaw",
            "windows": [
                {"days": ["mon", "tue", "wed", "thu", "fri"], "start": "08:00", "end": "18:00"}
            ],
            "max_gpus": 4,
            "max_duration_s": 86400,
            "max_gpu_hours_per_week": 100,
        },
    )
    assert rule.status == 201, rule.body
    phd = rule.body["id"]
    assert rule.body["windows"] == [{"days": [0, 1, 2, 3, 4], "start": "08:00", "end": "18:00"}]
    assert rule.body["created_by"] == "admin"
    for_bob = await admin.post("/rules", {**RULE, "name": "bob only", "users": ["bob"]})
    assert for_bob.status == 201, for_bob.body
    bobs = for_bob.body["id"]

    everything = await rule_ids(admin)
    assert {1, phd, bobs} <= everything
    assert await rule_ids(alice) == {1, phd}  # the default rule (group users) and phd's
    assert await rule_ids(bob) == {1, bobs}

    # Out of the group: the rule no longer applies to her.
    assert (await admin.delete("/groups/phd/members/alice")).status == 200
    assert await rule_ids(alice) == {1}
    assert (await admin.put("/groups/phd/members/alice")).status == 200
    assert await rule_ids(alice) == {1, phd}

    # PUT replaces the whole rule: what it leaves out takes its default.
    replaced = await admin.put(
        f"/rules/{phd}", {"name": "phd any time", "users": ["bob"], "all_gpus": True}
    )
    assert replaced.status == 200, replaced.body
    assert replaced.body["id"] == phd
    assert replaced.body["groups"] == []
    assert replaced.body["windows"] == []
    assert replaced.body["max_gpus"] is None
    assert await rule_ids(alice) == {1}
    assert await rule_ids(bob) == {1, phd, bobs}
    refused(await admin.put("/rules/999999", RULE), 404, "not_found")

    deleted = await admin.delete(f"/rules/{phd}")
    assert deleted.status == 200, deleted.body
    assert deleted.body == {"id": phd, "cancelled": [], "restored": []}
    refused(await admin.delete(f"/rules/{phd}"), 404, "not_found")
    assert (await admin.delete(f"/rules/{bobs}")).status == 200
    assert await rule_ids(bob) == {1}
    assert await rule_ids(admin) == everything - {phd, bobs}


async def test_bad_rules_get_a_json_error_and_change_nothing(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    before = await rule_ids(admin)
    window = {"days": ["mon"], "start": "08:00", "end": "18:00"}
    bad = [
        ({**RULE, "timezone": "Mars/Olympus_Mons"}, 400),
        ({**RULE, "timezone": "../../etc/passwd"}, 400),
        ({**RULE, "windows": [{**window, "days": ["someday"]}]}, 422),
        ({**RULE, "windows": [{**window, "days": [7]}]}, 422),
        ({**RULE, "windows": [{**window, "days": []}]}, 422),
        ({**RULE, "windows": [{**window, "start": "8 am"}]}, 422),
        ({**RULE, "windows": [{**window, "end": "24:30"}]}, 422),
        ({**RULE, "windows": [{"days": ["mon"], "start": "08:00"}]}, 422),
        ({**RULE, "windows": "weekdays"}, 422),
        ({**RULE, "valid_from": "2030-01-01T00:00:00"}, 422),  # no offset
        (
            {
                **RULE,
                "valid_from": "2030-01-02T00:00:00+00:00",
                "valid_until": "2030-01-01T00:00:00+00:00",
            },
            400,
        ),
        ({**RULE, "max_gpus": 0}, 400),
        ({**RULE, "max_gpu_hours_per_week": "NaN"}, 422),
        ({"name": "grants nothing", "users": ["alice"]}, 400),
        ({**RULE, "name": ""}, 422),
        ({**RULE, "unknown": 1}, 422),
        # Beyond what the service can hold: refused here, not failed there.
        ({**RULE, "max_gpus": 2**40}, 422),
        ({**RULE, "max_duration_s": 10**30}, 422),
        ({**RULE, "valid_from": "9999-12-31T23:59:59-05:00"}, 422),
        ({**RULE, "users": ["x" * 1000]}, 422),
    ]
    for body, status in bad:
        for answer in (await admin.post("/rules", body), await admin.put("/rules/1", body)):
            assert answer.status == status, (body, answer.body)
            assert answer.headers["Content-Type"].startswith("application/json")
            assert answer.body["error"] in ("invalid_request", "validation_failed")
    not_an_object = await admin.request("POST", "/rules", json=[RULE])
    refused(not_an_object, 422, "validation_failed")
    assert await rule_ids(admin) == before
    default = next(r for r in (await admin.get("/rules")).body if r["id"] == 1)
    assert default["all_gpus"] is True  # the bad PUTs left it as it was


async def test_path_parameters_are_validated(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    long = "x" * 65
    for answer in (
        await admin.get(f"/users/{long}"),
        await admin.patch(f"/users/{long}", {}),
        await admin.patch(f"/groups/{long}", {}),
        await admin.put(f"/groups/users/members/{long}"),
        await admin.delete("/rules/0"),
        await admin.put("/rules/abc", RULE),
        await admin.delete(f"/rules/{2**40}"),
    ):
        refused(answer, 422, "validation_failed")
        assert answer.body["details"]["in"] == "path"


async def test_unknown_users_groups_and_rules_are_404(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    refused(await admin.get("/users/nobody"), 404, "not_found")
    refused(await admin.patch("/users/nobody", {"email": "n@lab.example"}), 404, "not_found")
    refused(await admin.put("/groups/users/members/nobody"), 404, "not_found")
    refused(await admin.put("/groups/nogroup/members/alice"), 404, "not_found")
    refused(await admin.patch("/groups/nogroup", {"description": "x"}), 404, "not_found")
    refused(await admin.delete("/groups/nogroup"), 404, "not_found")
    refused(await admin.delete("/rules/999999"), 404, "not_found")


ROUTES: list[tuple[str, str, Any]] = [
    ("GET", "/users", None),
    ("POST", "/users", {"username": "x", "email": "x@lab.example", "password": PASSWORD}),
    ("GET", "/users/alice", None),
    ("PATCH", "/users/alice", {"email": "x@lab.example"}),
    ("GET", "/groups", None),
    ("POST", "/groups", {"name": "x"}),
    ("PATCH", "/groups/users", {"description": "x"}),
    ("DELETE", "/groups/users", None),
    ("PUT", "/groups/users/members/alice", None),
    ("DELETE", "/groups/users/members/alice", None),
    ("GET", "/rules", None),
    ("POST", "/rules", RULE),
    ("PUT", "/rules/1", RULE),
    ("DELETE", "/rules/1", None),
]


async def test_anonymous_callers_get_401_everywhere(system: ApiSystem) -> None:
    nobody = system.anonymous()
    for method, path, body in ROUTES:
        answer = await nobody.request(method, path, json=body)
        assert answer.status == 401, (method, path, answer.body)
        assert answer.body["error"] == "authentication_required"
    admin = await system.as_user("admin")
    assert 1 in await rule_ids(admin)
    assert "users" in {group["name"] for group in (await admin.get("/groups")).body}
