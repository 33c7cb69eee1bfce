"""Each user's calendar feed secret: the token in their `/calendar/{token}.ics` address.

A token is 32 random bytes shown once, when it is made; only its SHA-256 is stored, so a copy of
the database opens no feed. One per user: making a new one deletes the old in the same
transaction, and revoking deletes it, so an old address stops working at once. A token is found
by its hash (an index lookup): the hash of an unguessable token leaks nothing through timing,
and the stored hash is then compared with `hmac.compare_digest` all the same.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users as accounts
from services.accounts.api import Actor
from services.reservations.store import Store, now_ms
from services.reservations.tables import calendar_feeds, users
from services.shared.errors import NotFound

UNKNOWN_FEED = "no calendar feed has this address (it was revoked or replaced)"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def replace_token(conn: AsyncConnection, username: str) -> str:
    """A new token for `username`; their old one (if any) stops working."""
    # The user's row, locked on PostgreSQL: two concurrent replacements queue up here.
    await conn.execute(select(users.c.id).where(users.c.username == username).with_for_update())
    await conn.execute(delete(calendar_feeds).where(calendar_feeds.c.username == username))
    token = secrets.token_urlsafe(32)
    await conn.execute(
        insert(calendar_feeds).values(
            username=username, token_hash=token_hash(token), created_at_ms=now_ms()
        )
    )
    return token


async def revoke(conn: AsyncConnection, username: str) -> bool:
    """Delete the user's token; whether there was one."""
    gone = await conn.execute(delete(calendar_feeds).where(calendar_feeds.c.username == username))
    return bool(gone.rowcount)


async def owner_of(conn: AsyncConnection, token: str) -> str | None:
    """The username whose feed `token` opens, or None."""
    wanted = token_hash(token)
    row = (
        await conn.execute(
            select(calendar_feeds.c.username, calendar_feeds.c.token_hash).where(
                calendar_feeds.c.token_hash == wanted
            )
        )
    ).first()
    if row is None or not hmac.compare_digest(row.token_hash, wanted):
        return None
    return str(row.username)


async def exists(conn: AsyncConnection, username: str) -> bool:
    found = await conn.execute(
        select(calendar_feeds.c.created_at_ms).where(calendar_feeds.c.username == username)
    )
    return found.first() is not None


class CalendarFeedCalls:
    """The RPC methods: make, revoke and resolve a feed token."""

    def __init__(self, store: Store) -> None:
        self.store = store

    async def _actor(self, username: str) -> Actor:
        async with self.store.read() as conn:
            return await accounts.actor(conn, username)

    async def create(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        async with self.store.write() as conn:
            return {"token": await replace_token(conn, actor.username)}

    async def revoke(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        async with self.store.write() as conn:
            return {"revoked": await revoke(conn, actor.username)}

    async def state(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._actor(args["actor"])
        async with self.store.read() as conn:
            return {"exists": await exists(conn, actor.username)}

    async def owner(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self.store.read() as conn:
            username = await owner_of(conn, args["token"])
            # An account that is gone takes its feed with it.
            known = username is not None and await accounts.is_admin(conn, username) is not None
        if username is None or not known:
            raise NotFound(UNKNOWN_FEED)
        return {"username": username}
