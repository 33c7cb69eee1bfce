"""Refresh-token sessions: open at login, rotate on refresh, revoke on logout or on reuse.

A refresh token is 32 random bytes handed to the client once; only its SHA-256 is stored. Each
login starts a family. Refreshing marks the presented token rotated and issues the next one of
the family. A rotated token presented again means two parties hold it (a stolen copy, or a
replay): the whole family is revoked, and the legitimate client must log in again.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.outbox import add_event
from services.reservations.store import iso_ms
from services.reservations.tables import sessions

INVALID_TOKEN = "the refresh token is invalid or expired; log in again"
REUSED_TOKEN = "the refresh token was already used; every session of this login was revoked"
# Rows of sessions that ended this long ago are deleted when someone logs in.
KEEP_ENDED_MS = 24 * 3600 * 1000


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Refreshed:
    """The outcome of presenting a refresh token: the next one, or why there is none."""

    username: str | None = None
    token: dict[str, Any] | None = None
    reused: bool = False


async def _issue(
    conn: AsyncConnection, username: str, family: str, ttl_ms: int, now: int
) -> dict[str, Any]:
    token = secrets.token_urlsafe(32)
    await conn.execute(
        insert(sessions).values(
            token_hash=token_hash(token),
            family=family,
            username=username,
            created_at_ms=now,
            expires_at_ms=now + ttl_ms,
        )
    )
    return {"refresh_token": token, "refresh_expires_at": iso_ms(now + ttl_ms), "session": family}


async def open_session(
    conn: AsyncConnection, username: str, ttl_ms: int, now: int
) -> dict[str, Any]:
    """A new family with its first refresh token (and old ended sessions swept away)."""
    await conn.execute(delete(sessions).where(sessions.c.expires_at_ms < now - KEEP_ENDED_MS))
    return await _issue(conn, username, secrets.token_hex(16), ttl_ms, now)


async def rotate(conn: AsyncConnection, token: str, ttl_ms: int, now: int) -> Refreshed:
    """Replace `token` by the next of its family; a reused token revokes the family."""
    row = (
        await conn.execute(select(sessions).where(sessions.c.token_hash == token_hash(token)))
    ).first()
    if row is None or row.revoked_at_ms is not None or row.expires_at_ms <= now:
        return Refreshed()
    if row.rotated_at_ms is not None:
        await revoke_family(conn, row.family, now)
        return Refreshed(reused=True)
    # Conditional: of two concurrent refreshes with one token, only one wins.
    marked = await conn.execute(
        update(sessions)
        .where(sessions.c.id == row.id, sessions.c.rotated_at_ms.is_(None))
        .values(rotated_at_ms=now)
    )
    if marked.rowcount != 1:
        await revoke_family(conn, row.family, now)
        return Refreshed(reused=True)
    issued = await _issue(conn, row.username, row.family, ttl_ms, now)
    return Refreshed(username=row.username, token=issued)


async def _announce(conn: AsyncConnection, username: str, family: str | None, now: int) -> None:
    """`session.revoked`: the gateways refuse the session's access tokens from now on."""
    data = {"username": username, "session": family, "at": iso_ms(now)}
    await add_event(conn, "session.revoked", data)


async def revoke_family(conn: AsyncConnection, family: str, now: int) -> None:
    username = (
        await conn.execute(select(sessions.c.username).where(sessions.c.family == family))
    ).scalar()
    revoked = await conn.execute(
        update(sessions)
        .where(sessions.c.family == family, sessions.c.revoked_at_ms.is_(None))
        .values(revoked_at_ms=now)
    )
    if username is not None and revoked.rowcount:
        await _announce(conn, username, family, now)


async def close_session(conn: AsyncConnection, token: str, now: int) -> bool:
    """Logout: revoke the token's family. False when the token is unknown (nothing to do)."""
    family = (
        await conn.execute(
            select(sessions.c.family).where(sessions.c.token_hash == token_hash(token))
        )
    ).scalar()
    if family is None:
        return False
    await revoke_family(conn, family, now)
    return True


async def revoke_user(conn: AsyncConnection, username: str, now: int) -> None:
    """Every session of a user ends (their password changed), access tokens too."""
    await conn.execute(
        update(sessions)
        .where(sessions.c.username == username, sessions.c.revoked_at_ms.is_(None))
        .values(revoked_at_ms=now)
    )
    await _announce(conn, username, None, now)
