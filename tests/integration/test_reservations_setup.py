"""The first run's set-up tokens (services.accounts.setup_tokens) on SQLite and PostgreSQL: a token
creates the first admin once, only while there is none, and two at once make one admin.

The database fixtures are tests/support/accounts_store.py's (each test its own SQLite file and
PostgreSQL database), imported: pytest takes them as this module's own.
"""
# ruff: noqa: F811 (the imported `store` fixture is every test's parameter)

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy import select

from services.accounts import setup_tokens as setup
from services.accounts import users as accounts
from services.reservations.store import Store
from services.reservations.tables import setup_tokens, users
from services.shared.errors import Forbidden, InvalidRequest, StateConflict
from tests.support.accounts_store import (  # noqa: F401 (fixtures)
    _cheap_passwords,
    add_user,
    database_url,
    events,
    store,
)

GOOD = {"username": "root1", "email": "root1@localhost", "password": "long enough"}


async def issue(store: Store) -> str | None:
    async with store.write() as conn:
        return await setup.issue_token(conn)


async def create(store: Store, token: str, **fields: Any) -> dict[str, Any]:
    async with store.write() as conn:
        return await setup.create_first_admin(conn, token=token, **{**GOOD, **fields})


async def admins(store: Store) -> list[str]:
    async with store.read() as conn:
        found = await conn.execute(select(users.c.username).where(users.c.is_admin))
        return sorted(found.scalars())


async def test_tokens_are_random_and_only_their_hashes_are_stored(store: Store) -> None:
    first, second = await issue(store), await issue(store)
    assert first and second and first != second
    async with store.read() as conn:
        stored = set((await conn.execute(select(setup_tokens.c.token_hash))).scalars())
    assert stored == {setup.token_hash(first), setup.token_hash(second)}
    assert first not in str(stored)


async def test_a_token_creates_the_first_admin_once_and_every_other_token_dies(
    store: Store,
) -> None:
    first, second = await issue(store), await issue(store)
    assert first and second
    async with store.read() as conn:
        assert await setup.needed(conn)

    user = await create(store, second)

    assert user["username"] == "root1"
    assert "admin" in user["roles"]
    assert await admins(store) == ["root1"]
    assert [kind for kind, _ in await events(store)] == ["user.created"]
    for token in (first, second):
        with pytest.raises(StateConflict):
            await create(store, token, username="root2")
    async with store.read() as conn:
        assert not await setup.needed(conn)
        assert (await conn.execute(select(setup_tokens))).first() is None


async def test_a_wrong_token_or_wrong_fields_change_nothing(store: Store) -> None:
    token = await issue(store)
    assert token

    with pytest.raises(Forbidden):
        await create(store, token + "x")
    with pytest.raises(Forbidden):
        await create(store, "")
    with pytest.raises(InvalidRequest) as refused:
        await create(store, token, password="short", username="Root")
    assert set(refused.value.details) == {"password", "username"}
    assert await admins(store) == []

    await create(store, token)  # still good: nothing happened before
    assert await admins(store) == ["root1"]


async def test_two_tokens_used_at_once_make_one_admin(store: Store) -> None:
    first, second = await issue(store), await issue(store)
    assert first and second

    results = await asyncio.gather(
        create(store, first, username="root1"),
        create(store, second, username="root2"),
        return_exceptions=True,
    )

    assert sorted(type(r).__name__ for r in results) == ["StateConflict", "dict"]
    assert len(await admins(store)) == 1


async def test_an_admin_made_otherwise_ends_the_set_up(store: Store) -> None:
    token = await issue(store)
    assert token
    await add_user(store, "boss", is_admin=True)

    with pytest.raises(StateConflict):
        await create(store, token)
    assert await issue(store) is None
    async with store.read() as conn:
        assert (await conn.execute(select(setup_tokens))).first() is None
        assert await accounts.count_admins(conn) == 1
