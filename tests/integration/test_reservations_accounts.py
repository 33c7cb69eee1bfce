"""Accounts and groups (services.accounts.users) on SQLite and PostgreSQL.

Each test runs on its own migrated database: a SQLite file in its temp dir, and its own
PostgreSQL database (the fixtures of tests/support/accounts_store.py). Passwords are hashed with
real argon2 at cheap parameters, so the suite stays fast while hashing and verifying are the
real thing.
"""

# ruff: noqa: F811 (the imported `store` fixture is every test's parameter)

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

import pytest
from sqlalchemy import select

from services.accounts import users as accounts
from services.reservations.store import Store
from services.reservations.tables import users
from services.shared.errors import (
    AlreadyExists,
    AuthenticationFailed,
    InvalidRequest,
    NotFound,
)
from tests.support.accounts_store import (  # noqa: F401 (fixtures)
    PASSWORD,
    _cheap_passwords,
    add_user,
    database_url,
    events,
    store,
)


async def stored_hash(store: Store, username: str) -> str:
    async with store.read() as conn:
        found = await conn.execute(
            select(users.c.password_hash).where(users.c.username == username)
        )
        return str(found.scalar_one())


# --- users ------------------------------------------------------------------------------------


async def test_create_user_joins_the_default_group_and_emits_one_event(store: Store) -> None:
    user = await add_user(store)

    assert user == {
        "username": "alice",
        "email": "alice@lab.example",
        "roles": ["user"],
        "groups": ["users"],  # the default group created by the migration
        "created_at": user["created_at"],
        "source": "local",
        "status": "active",
        "change_at_sign_in": False,
    }
    assert datetime.fromisoformat(user["created_at"]).utcoffset() is not None
    assert await events(store) == [
        (
            "user.created",
            {
                "username": "alice",
                "email": "alice@lab.example",
                "roles": ["user"],
                "groups": ["users"],
            },
        )
    ]


async def test_create_admin_in_named_groups(store: Store) -> None:
    async with store.write() as conn:
        await accounts.create_group(conn, name="phd")
        await accounts.create_group(conn, name="nlp.team")

    user = await add_user(store, "bob", is_admin=True, groups=["phd", "nlp.team"])

    assert user["roles"] == ["user", "admin"]
    assert user["groups"] == ["nlp.team", "phd", "users"]


async def test_unknown_group_is_refused_and_nothing_is_created(store: Store) -> None:
    with pytest.raises(NotFound) as refused:
        await add_user(store, groups=["users", "nope"])

    assert "'nope'" in refused.value.message
    assert refused.value.details == {"groups": ["nope"]}
    async with store.read() as conn:
        assert await accounts.list_users(conn) == []
    assert await events(store) == []


async def test_duplicate_username_is_refused(store: Store) -> None:
    await add_user(store)

    with pytest.raises(AlreadyExists, match="alice"):
        await add_user(store, email="other@lab.example")

    assert len(await events(store)) == 1


async def test_concurrent_creates_of_one_username_make_one_account(store: Store) -> None:
    results = await asyncio.gather(add_user(store), add_user(store), return_exceptions=True)

    assert sorted(type(result).__name__ for result in results) == ["AlreadyExists", "dict"]
    assert [kind for kind, _ in await events(store)] == ["user.created"]


@pytest.mark.parametrize(
    ("field", "values"),
    [
        ("username", {"username": "Alice"}),
        ("username", {"username": "1alice"}),
        ("username", {"username": "al ice"}),
        ("username", {"username": "alice\n"}),
        ("username", {"username": ""}),
        ("username", {"username": "a" * 33}),
        ("email", {"email": "alice"}),
        ("email", {"email": "alice@lab"}),
        ("email", {"email": "a@b@lab.example"}),
        ("email", {"email": "@lab.example"}),
        ("email", {"email": "alice@"}),
        ("email", {"email": "al ice@lab.example"}),
        ("email", {"email": "a@" + "b" * 250 + ".org"}),
        ("password", {"password": "short"}),
    ],
)
async def test_invalid_fields_are_refused_naming_the_field(
    store: Store, field: str, values: dict[str, str]
) -> None:
    arguments = {"username": "alice", "email": "alice@lab.example", "password": PASSWORD}

    with pytest.raises(InvalidRequest) as refused:
        async with store.write() as conn:
            await accounts.create_user(conn, **{**arguments, **values}, actor="admin")

    assert set(refused.value.details) == {field}
    assert field in refused.value.message
    assert await events(store) == []


async def test_every_problem_is_named_at_once(store: Store) -> None:
    with pytest.raises(InvalidRequest) as refused:
        async with store.write() as conn:
            await accounts.create_user(
                conn, username="Bad Name", email="nope", password="x", actor="admin"
            )

    assert set(refused.value.details) == {"username", "email", "password"}


async def test_longest_unix_username_is_accepted(store: Store) -> None:
    name = "_" + "a1-_" * 7 + "bcd"
    assert len(name) == 32

    assert (await add_user(store, name))["username"] == name


async def test_list_and_get_users(store: Store) -> None:
    for name in ("carol", "alice", "bob"):
        await add_user(store, name, is_admin=name == "bob")

    async with store.read() as conn:
        listed = await accounts.list_users(conn)
        bob = await accounts.get_user(conn, "bob")
        with pytest.raises(NotFound, match="dave"):
            await accounts.get_user(conn, "dave")

    assert [user["username"] for user in listed] == ["alice", "bob", "carol"]
    assert listed[1] == bob
    assert bob["roles"] == ["user", "admin"]
    assert all(user["groups"] == ["users"] for user in listed)


async def test_member_groups_is_admin_and_count_admins(store: Store) -> None:
    await add_user(store, "alice", is_admin=True)
    await add_user(store, "bob")

    async with store.read() as conn:
        assert await accounts.member_groups(conn, "bob") == frozenset({"users"})
        assert await accounts.member_groups(conn, "nobody") is None
        assert await accounts.is_admin(conn, "alice") is True
        assert await accounts.is_admin(conn, "bob") is False
        assert await accounts.is_admin(conn, "nobody") is None
        assert await accounts.count_admins(conn) == 1


async def test_update_user_emits_what_changed_and_only_when_something_did(store: Store) -> None:
    await add_user(store)

    async with store.write() as conn:
        same = await accounts.update_user(
            conn, "alice", email="alice@lab.example", is_admin=False, actor="admin"
        )
    async with store.write() as conn:
        changed = await accounts.update_user(
            conn, "alice", email="a@new.example", is_admin=True, actor="admin"
        )

    assert same["email"] == "alice@lab.example"
    assert changed["email"] == "a@new.example"
    assert changed["roles"] == ["user", "admin"]
    assert [kind for kind, _ in await events(store)] == ["user.created", "user.updated"]
    assert (await events(store))[-1][1] == {
        "username": "alice",
        "email": "a@new.example",
        "roles": ["user", "admin"],
        "groups": ["users"],
        "changed": ["email", "roles"],
    }


async def test_update_user_refuses_bad_values_and_unknown_users(store: Store) -> None:
    await add_user(store)

    async with store.write() as conn:
        with pytest.raises(InvalidRequest) as refused:
            await accounts.update_user(conn, "alice", email="bad", actor="admin")
        assert set(refused.value.details) == {"email"}
        with pytest.raises(InvalidRequest) as refused:
            await accounts.update_user(conn, "alice", password="short", actor="admin")
        assert set(refused.value.details) == {"password"}
        with pytest.raises(NotFound):
            await accounts.update_user(conn, "bob", is_admin=True, actor="admin")


async def test_new_password_replaces_the_old_one(store: Store) -> None:
    await add_user(store)
    old_hash = await stored_hash(store, "alice")

    async with store.write() as conn:
        await accounts.update_user(conn, "alice", password="a new passphrase", actor="alice")

    assert await stored_hash(store, "alice") != old_hash
    async with store.read() as conn:
        assert (await accounts.authenticate(conn, "alice", "a new passphrase"))["username"] == (
            "alice"
        )
        with pytest.raises(AuthenticationFailed):
            await accounts.authenticate(conn, "alice", PASSWORD)
    assert (await events(store))[-1][1]["changed"] == ["password"]


async def test_the_last_admin_cannot_be_demoted(store: Store) -> None:
    await add_user(store, "alice", is_admin=True)
    await add_user(store, "bob", is_admin=True)

    async with store.write() as conn:
        await accounts.update_user(conn, "bob", is_admin=False, actor="alice")
    with pytest.raises(InvalidRequest, match="last admin"):
        async with store.write() as conn:
            await accounts.update_user(conn, "alice", is_admin=False, actor="alice")

    async with store.read() as conn:
        assert await accounts.count_admins(conn) == 1
        assert await accounts.is_admin(conn, "alice") is True


# --- authentication ---------------------------------------------------------------------------


async def test_authenticate_returns_the_public_user(store: Store) -> None:
    created = await add_user(store)

    async with store.read() as conn:
        assert await accounts.authenticate(conn, "alice", PASSWORD) == created


async def test_unknown_user_and_wrong_password_fail_alike(store: Store) -> None:
    await add_user(store)

    failures = []
    async with store.read() as conn:
        for username, password in (
            ("alice", "wrong password"),
            ("nobody", PASSWORD),
            ("Not A Username", PASSWORD),
            ("alice", ""),
        ):
            with pytest.raises(AuthenticationFailed) as failed:
                await accounts.authenticate(conn, username, password)
            failures.append((type(failed.value), failed.value.message, failed.value.details))

    assert failures == [(AuthenticationFailed, "wrong username or password", {})] * 4


async def test_the_hash_never_leaves_the_module(store: Store) -> None:
    async with store.write() as conn:
        await accounts.create_group(conn, name="phd")
    returned: list[Any] = [await add_user(store, is_admin=True, groups=["phd"])]
    async with store.write() as conn:
        returned.append(await accounts.update_user(conn, "alice", password="x" * 9, actor="a"))
        returned.append(await accounts.get_user(conn, "alice"))
        returned.append(await accounts.list_users(conn))
        returned.append(await accounts.authenticate(conn, "alice", "x" * 9))
        returned.append(await accounts.list_groups(conn))
    hashed = await stored_hash(store, "alice")

    text = repr(returned) + repr(await events(store))
    assert hashed not in text
    assert "$argon2" not in text
    assert "password_hash" not in text


# --- groups -----------------------------------------------------------------------------------


async def test_group_crud(store: Store) -> None:
    async with store.write() as conn:
        created = await accounts.create_group(conn, name="phd", description="PhD students")
        with pytest.raises(AlreadyExists):
            await accounts.create_group(conn, name="phd")
        with pytest.raises(InvalidRequest) as refused:
            await accounts.create_group(conn, name="-bad name")
        assert set(refused.value.details) == {"name"}
        with pytest.raises(InvalidRequest) as refused:
            await accounts.create_group(conn, name="long", description="x" * 501)
        assert set(refused.value.details) == {"description"}
        updated = await accounts.update_group(conn, "phd", description="Doctoral", is_default=True)
        with pytest.raises(NotFound):
            await accounts.update_group(conn, "nope", description="")

    assert created == {
        "name": "phd",
        "description": "PhD students",
        "is_default": False,
        "members": [],
    }
    assert updated == {"name": "phd", "description": "Doctoral", "is_default": True, "members": []}

    # A new user now joins both default groups; existing users were not added.
    user = await add_user(store)
    assert user["groups"] == ["phd", "users"]

    async with store.write() as conn:
        assert [g["name"] for g in await accounts.list_groups(conn)] == ["phd", "users"]
        await accounts.delete_group(conn, "phd")
        with pytest.raises(NotFound):
            await accounts.delete_group(conn, "phd")
        assert await accounts.list_groups(conn) == [
            {
                "name": "users",
                "description": "Everyone: new users join it.",
                "is_default": True,
                "members": ["alice"],
            }
        ]
        assert (await accounts.get_user(conn, "alice"))["groups"] == ["users"]

    # Deleting a group with a member changed that member's groups: one event for them.
    assert (await events(store))[-1] == (
        "user.updated",
        {
            "username": "alice",
            "email": "alice@lab.example",
            "roles": ["user"],
            "groups": ["users"],
            "changed": ["groups"],
        },
    )
    assert len(await events(store)) == 2


async def test_membership_changes_emit_one_event_each(store: Store) -> None:
    await add_user(store, "alice")
    await add_user(store, "bob")
    async with store.write() as conn:
        await accounts.create_group(conn, name="phd")

    async with store.write() as conn:
        assert await accounts.add_member(conn, "phd", "alice", "admin") is True
        assert await accounts.add_member(conn, "phd", "alice", "admin") is False
        assert await accounts.add_member(conn, "phd", "bob", actor="admin") is True
        assert await accounts.member_groups(conn, "alice") == frozenset({"phd", "users"})
    async with store.write() as conn:
        assert await accounts.remove_member(conn, "phd", "bob", "admin") is True
        assert await accounts.remove_member(conn, "phd", "bob", "admin") is False
        with pytest.raises(NotFound, match="nope"):
            await accounts.add_member(conn, "nope", "alice", "admin")
        with pytest.raises(NotFound, match="carol"):
            await accounts.remove_member(conn, "phd", "carol", "admin")

    async with store.read() as conn:
        phd = [g for g in await accounts.list_groups(conn) if g["name"] == "phd"]
    assert phd[0]["members"] == ["alice"]
    updates = [data for kind, data in await events(store) if kind == "user.updated"]
    assert [(u["username"], u["groups"], u["changed"]) for u in updates] == [
        ("alice", ["phd", "users"], ["groups"]),
        ("bob", ["phd", "users"], ["groups"]),
        ("bob", ["users"], ["groups"]),
    ]


async def test_concurrent_adds_of_one_membership_change_it_once(store: Store) -> None:
    await add_user(store)
    async with store.write() as conn:
        await accounts.create_group(conn, name="phd")

    async def join() -> bool:
        async with store.write() as conn:
            return await accounts.add_member(conn, "phd", "alice", "admin")

    assert sorted(await asyncio.gather(join(), join(), join())) == [False, False, True]
    assert [kind for kind, _ in await events(store)] == ["user.created", "user.updated"]
