"""One-time password links: an invitation (the account waits for its first password) or a reset
an admin asked for (a new password replaces the old one).

A link's token is 32 random bytes shown once; only its SHA-256 is stored, so a copy of the
database opens no account. A user has at most one live link: a new one replaces it. Using a
link sets the password and deletes the link in one transaction, so it works once; it expires
after [auth] password_link_ttl_s. Directory (LDAP) accounts have no password here: no link.
"""

from __future__ import annotations

import asyncio
import hashlib
import secrets
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users as accounts
from services.accounts.passwords import hash_password
from services.reservations.outbox import add_event
from services.reservations.store import iso_ms
from services.reservations.tables import password_links, users
from services.shared.errors import Forbidden, StateConflict

BAD_LINK = "this link is not valid: it was used, replaced or expired (ask an admin for a new one)"


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def issue(
    conn: AsyncConnection, username: str, purpose: str, *, actor: str, ttl_ms: int, now: int
) -> dict[str, Any]:
    """A new link for `username` (its earlier one stops working): {token, expires_at}."""
    user = await accounts.get_user(conn, username)
    if user["source"] == "ldap":
        raise StateConflict(accounts.DIRECTORY_PASSWORD, {"username": username})
    if user["status"] == "deactivated":
        raise StateConflict(f"{username} is deactivated: activate the account first")
    token = secrets.token_urlsafe(32)
    await conn.execute(delete(password_links).where(password_links.c.username == username))
    await conn.execute(
        insert(password_links).values(
            token_hash=token_hash(token),
            username=username,
            purpose=purpose,
            created_by=actor,
            created_at_ms=now,
            expires_at_ms=now + ttl_ms,
        )
    )
    return {"token": token, "expires_at": iso_ms(now + ttl_ms), "purpose": purpose}


async def _live(conn: AsyncConnection, token: str, now: int) -> Any:
    row = (
        await conn.execute(
            select(password_links).where(password_links.c.token_hash == token_hash(token))
        )
    ).first()
    if row is None or row.expires_at_ms <= now:
        raise Forbidden(BAD_LINK)
    return row


async def peek(conn: AsyncConnection, token: str, now: int) -> dict[str, Any]:
    """Whose link it is and what for, without using it (the page that asks for the password)."""
    row = await _live(conn, token, now)
    return {
        "username": row.username,
        "purpose": row.purpose,
        "expires_at": iso_ms(row.expires_at_ms),
    }


async def use(conn: AsyncConnection, token: str, password: str, now: int) -> dict[str, Any]:
    """Set the link's user's password and spend the link: the user's public form.

    Forbidden for an unknown, used or expired link; InvalidRequest for a bad password (the
    link is then kept)."""
    row = await _live(conn, token, now)
    accounts.check_user_fields(password=password)
    spent = await conn.execute(
        delete(password_links).where(password_links.c.token_hash == row.token_hash)
    )
    if spent.rowcount != 1:  # a concurrent request used it between our read and this delete
        raise Forbidden(BAD_LINK)
    password_hash = await asyncio.to_thread(hash_password, password)
    await conn.execute(
        update(users)
        .where(users.c.username == row.username)
        .values(password_hash=password_hash, change_at_sign_in=False, updated_at_ms=now)
    )
    user = await accounts.get_user(conn, row.username)
    event = {key: user[key] for key in ("username", "email", "roles", "groups")}
    await add_event(conn, "user.updated", {**event, "changed": ["password"]})
    return user


async def forget(conn: AsyncConnection, username: str) -> None:
    """The user's link, if any, stops working (deactivated or deleted)."""
    await conn.execute(delete(password_links).where(password_links.c.username == username))
