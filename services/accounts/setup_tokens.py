"""The first run: one-time set-up tokens that create the first admin from the web UI.

While no admin exists, the gateway (at start) and `warden setup-link` ask for a token and print
it in a link. A token is 32 random bytes shown once; only its SHA-256 is stored, so a copy of the
database holds nothing that opens the set-up. Using one creates the first admin in the same
transaction that deletes every token: it works once, and the delete settles two concurrent uses
(on PostgreSQL the second waits for the first's row lock and then finds nothing to delete).
Tokens do not expire by time: none is of any use once an admin exists.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from typing import Any

from sqlalchemy import delete, insert, select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users as accounts
from services.reservations.store import now_ms
from services.reservations.tables import setup_tokens
from services.shared.errors import Forbidden, StateConflict

ADMIN_EXISTS = "the first administrator exists already: sign in instead"
BAD_TOKEN = "the set-up token is not valid (ask for a new link: `warden setup-link`)"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def needed(conn: AsyncConnection) -> bool:
    """Whether the set-up is still to be done: no admin exists."""
    return await accounts.count_admins(conn) == 0


async def issue_token(conn: AsyncConnection) -> str | None:
    """A new set-up token, or None when an admin exists (then old tokens are swept away)."""
    if not await needed(conn):
        await conn.execute(delete(setup_tokens))
        return None
    token = secrets.token_urlsafe(32)
    await conn.execute(
        insert(setup_tokens).values(token_hash=token_hash(token), created_at_ms=now_ms())
    )
    return token


async def _token_known(conn: AsyncConnection, token: str) -> bool:
    wanted = token_hash(token)
    known = (await conn.execute(select(setup_tokens.c.token_hash))).scalars().all()
    # Compared in constant time, each stored hash against the presented one's.
    found = False
    for stored in known:
        found |= hmac.compare_digest(stored, wanted)
    return found


async def create_first_admin(
    conn: AsyncConnection, *, token: str, username: str, email: str, password: str
) -> dict[str, Any]:
    """The first admin, made with a valid token while no admin exists; every token is spent.

    StateConflict once an admin exists, Forbidden for a token that is not (or no longer) valid,
    InvalidRequest naming the bad fields (the token is then kept: nothing happened)."""
    if not await needed(conn):
        raise StateConflict(ADMIN_EXISTS)
    if not await _token_known(conn, token):
        raise Forbidden(BAD_TOKEN)
    accounts.check_user_fields(username=username, email=email, password=password)
    spent = await conn.execute(
        delete(setup_tokens).where(setup_tokens.c.token_hash == token_hash(token))
    )
    if spent.rowcount != 1:  # another request used it between our read and this delete
        raise StateConflict(ADMIN_EXISTS)
    await conn.execute(delete(setup_tokens))
    return await accounts.create_user(
        conn, username=username, email=email, password=password, is_admin=True, actor="setup"
    )
