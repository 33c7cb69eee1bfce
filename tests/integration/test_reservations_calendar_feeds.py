"""Calendar-feed tokens (services.accounts.calendar_feeds) on SQLite and PostgreSQL: only a
hash is stored, one per user (a new one replaces the old), revoking ends it at once, and two
replacements at once leave exactly one working token.

The database fixtures are tests/support/accounts_store.py's, imported.
"""
# ruff: noqa: F811 (the imported `store` fixture is every test's parameter)

from __future__ import annotations

import asyncio

from sqlalchemy import select

from services.accounts import calendar_feeds
from services.reservations.store import Store
from services.reservations.tables import calendar_feeds as feeds_table
from tests.support.accounts_store import (  # noqa: F401 (fixtures)
    _cheap_passwords,
    add_user,
    database_url,
    events,
    store,
)


async def replace(store: Store, username: str) -> str:
    async with store.write() as conn:
        return await calendar_feeds.replace_token(conn, username)


async def owner(store: Store, token: str) -> str | None:
    async with store.read() as conn:
        return await calendar_feeds.owner_of(conn, token)


async def stored(store: Store) -> dict[str, str]:
    async with store.read() as conn:
        rows = (await conn.execute(select(feeds_table))).all()
    return {row.username: row.token_hash for row in rows}


async def test_a_token_opens_its_users_feed_and_only_its_hash_is_stored(store: Store) -> None:
    await add_user(store, "alice")
    await add_user(store, "bob")
    alice, bob = await replace(store, "alice"), await replace(store, "bob")

    assert alice != bob and len(alice) >= 40
    assert await owner(store, alice) == "alice"
    assert await owner(store, bob) == "bob"
    assert await owner(store, alice + "x") is None
    assert await owner(store, "") is None
    hashes = await stored(store)
    assert hashes == {
        "alice": calendar_feeds.token_hash(alice),
        "bob": calendar_feeds.token_hash(bob),
    }
    assert alice not in str(hashes) and bob not in str(hashes)


async def test_a_new_token_replaces_the_old_and_revoking_ends_it(store: Store) -> None:
    await add_user(store, "alice")
    old = await replace(store, "alice")
    new = await replace(store, "alice")

    assert await owner(store, old) is None
    assert await owner(store, new) == "alice"
    assert list(await stored(store)) == ["alice"]

    async with store.write() as conn:
        assert await calendar_feeds.revoke(conn, "alice") is True
    assert await owner(store, new) is None
    async with store.read() as conn:
        assert not await calendar_feeds.exists(conn, "alice")
    async with store.write() as conn:
        assert await calendar_feeds.revoke(conn, "alice") is False  # nothing left to revoke


async def test_replacements_at_once_leave_one_working_token(store: Store) -> None:
    await add_user(store, "alice")
    tokens = await asyncio.gather(*(replace(store, "alice") for _ in range(4)))

    working = [token for token in tokens if await owner(store, token) == "alice"]
    assert len(set(tokens)) == 4
    assert len(working) == 1
    assert list(await stored(store)) == ["alice"]
