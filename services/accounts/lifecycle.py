"""Accounts that end: deactivated (kept with their history, no sign-in) or deleted.

Both sign the user out everywhere (`session.revoked`, so every gateway refuses their access
tokens) and spend their password link. Neither is allowed on one's own account or on the last
active admin: nobody could manage Warden any more. Reservations keep their owner's name either
way; freeing a deactivated user's future bookings is the caller's choice (`calls.py`).
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import delete, func, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import password_links, sessions
from services.accounts import users as accounts
from services.accounts.api import Actor
from services.reservations.outbox import add_event
from services.reservations.tables import calendar_feeds, group_members, reservations, users
from services.shared.errors import InvalidRequest

log = logging.getLogger("warden.reservations")


def _event(user: dict[str, Any]) -> dict[str, Any]:
    return {key: user[key] for key in ("username", "email", "roles", "groups")}


async def _refuse_ending(conn: AsyncConnection, actor: Actor, username: str, what: str) -> dict:
    """The account to end; InvalidRequest for one's own or the last active admin's."""
    user = await accounts.get_user(conn, username)
    if username == actor.username:
        raise InvalidRequest(f"you cannot {what} your own account", {"username": username})
    if "admin" in user["roles"] and user["status"] != "deactivated":
        query = (
            select(func.count())
            .select_from(users)
            .where(users.c.is_admin, users.c.deactivated_at_ms.is_(None))
        )
        if int((await conn.execute(query)).scalar_one()) <= 1:
            raise InvalidRequest(
                f"{username} is the last active admin: make another user an admin first",
                {"username": username},
            )
    return user


async def set_active(
    conn: AsyncConnection, actor: Actor, username: str, *, active: bool, now: int
) -> dict[str, Any]:
    """Deactivate (sign out everywhere, no sign-in) or activate again; `user.updated`
    (changed: status) when it changed."""
    user = await (
        _refuse_ending(conn, actor, username, "deactivate")
        if not active
        else accounts.get_user(conn, username)
    )
    if (user["status"] != "deactivated") == active:
        return user
    await conn.execute(
        update(users)
        .where(users.c.username == username)
        .values(deactivated_at_ms=None if active else now, updated_at_ms=now)
    )
    if not active:
        await sessions.revoke_user(conn, username, now)
        await password_links.forget(conn, username)
    user = await accounts.get_user(conn, username)
    await add_event(conn, "user.updated", {**_event(user), "changed": ["status"]})
    state = "activated" if active else "deactivated"
    log.info("user %s %s", username, state, extra={"fields": {"actor": actor.username}})
    return user


async def delete_user(conn: AsyncConnection, actor: Actor, username: str, now: int) -> None:
    """Delete the account (its memberships, feed and link too); `user.deleted`."""
    user = await _refuse_ending(conn, actor, username, "delete")
    user_id = (
        await conn.execute(select(users.c.id).where(users.c.username == username))
    ).scalar_one()
    await sessions.revoke_user(conn, username, now)
    await password_links.forget(conn, username)
    await conn.execute(delete(calendar_feeds).where(calendar_feeds.c.username == username))
    await conn.execute(delete(group_members).where(group_members.c.user_id == user_id))
    await conn.execute(delete(users).where(users.c.id == user_id))
    await add_event(conn, "user.deleted", _event(user))
    log.info("user %s deleted", username, extra={"fields": {"actor": actor.username}})


async def future_bookings(conn: AsyncConnection, username: str, now: int) -> list[int]:
    """Ids of the user's reservations that have not started, by start."""
    query = (
        select(reservations.c.id)
        .where(
            reservations.c.owner == username,
            reservations.c.status == "active",
            reservations.c.start_ms > now,
        )
        .order_by(reservations.c.start_ms, reservations.c.id)
    )
    return list((await conn.execute(query)).scalars())
