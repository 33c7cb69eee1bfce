"""The Warden account of a directory user: created at their first sign-in, its e-mail, role and
mapped groups brought up to date at each later one.

An account created here has no local password: its password hash is the marker `LDAP_SOURCE`,
which no password verifies, so it signs in through the directory only. Every other account is
local and signs in with its own password, even while LDAP is on (the first admin always can).
An admin who sets a password for a directory account makes it a local one.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from typing import Any

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import fields
from services.accounts import users as accounts
from services.accounts.ldap_directory import DirectoryUser, Grant
from services.reservations.store import now_ms
from services.reservations.tables import users
from services.shared.errors import AlreadyExists, Forbidden, InvalidRequest

log = logging.getLogger("warden.reservations.ldap")

LDAP_SOURCE = accounts.LDAP_SOURCE


async def source(conn: AsyncConnection, username: str) -> str | None:
    """ "local" or "ldap" for an existing account; None when there is none."""
    found = await conn.execute(select(users.c.password_hash).where(users.c.username == username))
    stored = found.scalar_one_or_none()
    if stored is None:
        return None
    return "ldap" if stored == LDAP_SOURCE else "local"


async def _ensure_groups(conn: AsyncConnection, names: frozenset[str]) -> None:
    for name in sorted(names):
        with contextlib.suppress(AlreadyExists):
            await accounts.create_group(conn, name=name, description="mapped from LDAP")


def _checked(user: DirectoryUser) -> None:
    problem = fields.username_problem(user.username)
    if problem:
        raise Forbidden(
            f"the directory's username {user.username!r} cannot be a Warden username: {problem}",
            {"username": problem},
        )
    problem = fields.email_problem(user.email)
    if problem:
        raise Forbidden(
            f"the directory holds no usable e-mail address for {user.username} "
            f"({user.email!r}: {problem})",
            {"email": problem},
        )


async def signed_in(
    conn: AsyncConnection, user: DirectoryUser, grant: Grant
) -> tuple[dict[str, Any], frozenset[str]]:
    """The account of `user` as it is now, and the Warden groups they were taken out of."""
    _checked(user)
    kind = await source(conn, user.username)
    if kind == "local":
        # A name taken by a local account: the directory's person is not its owner.
        raise Forbidden(
            f"{user.username} is a local Warden account: sign in with its own password",
            {"username": user.username},
        )
    await _ensure_groups(conn, grant.groups)
    if kind is None:
        await accounts.create_user(
            conn,
            username=user.username,
            email=user.email,
            password=secrets.token_urlsafe(24),  # replaced at once by the marker below
            is_admin=bool(grant.is_admin),
            groups=grant.groups,
            actor="ldap",
        )
        await conn.execute(
            update(users)
            .where(users.c.username == user.username)
            .values(password_hash=LDAP_SOURCE, updated_at_ms=now_ms())
        )
        return await accounts.get_user(conn, user.username), frozenset()
    current = await accounts.get_user(conn, user.username)
    if current["status"] == "deactivated":
        raise Forbidden(accounts.DEACTIVATED, {"username": user.username})
    is_admin = grant.is_admin
    if is_admin is False and "admin" in current["roles"] and await accounts.count_admins(conn) <= 1:
        log.warning("LDAP: %s left the admin groups but is the last admin: kept", user.username)
        is_admin = None
    try:
        await accounts.update_user(
            conn, user.username, email=user.email, is_admin=is_admin, actor="ldap"
        )
    except InvalidRequest as err:  # the last admin, demoted by a concurrent change
        log.warning("LDAP: %s kept as before: %s", user.username, err)
    have = set(current["groups"])
    for name in sorted(grant.groups - have):
        await accounts.add_member(conn, name, user.username, "ldap")
    removed = (grant.managed & have) - grant.groups
    for name in sorted(removed):
        await accounts.remove_member(conn, name, user.username, "ldap")
    return await accounts.get_user(conn, user.username), removed
