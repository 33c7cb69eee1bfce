"""Accounts and groups: who may log in, who is an admin, who belongs to which group.

Every function takes an `AsyncConnection` and leaves the transaction to its caller: changes
run inside `Store.write()`, so an account change and its `user.*` event (`add_event`) commit
together or not at all. A username is the person's UNIX username on the GPU hosts: it is what
GPU processes are matched against.

The public form of a user never holds the password hash. Hashing and verifying (argon2, about
0.15 s each) run in a worker thread so they never block the event loop, and an unknown user
costs as much as a wrong password: both fail with the same error.
"""

from __future__ import annotations

import asyncio
import logging
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import delete, func, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.engine import Row
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts.api import Actor
from services.accounts.fields import (
    check_user_fields,
    description_problem,
    group_name_problem,
    refuse_if,
)
from services.accounts.passwords import hash_password, verify_password
from services.reservations.outbox import add_event
from services.reservations.store import iso_ms, now_ms
from services.reservations.tables import group_members, users
from services.reservations.tables import groups as group_table
from services.shared.errors import (
    AlreadyExists,
    AuthenticationFailed,
    Forbidden,
    InvalidRequest,
    NotFound,
    StateConflict,
)

__all__ = ["check_user_fields"]  # used through this module by the CLI and the set-up

log = logging.getLogger("warden.reservations")

_Row = Row[*tuple[Any, ...]]  # a row of any columns

_CHUNK = 500  # names per IN (...) list
WRONG_LOGIN = "wrong username or password"
DIRECTORY_PASSWORD = "a directory (LDAP) account's password is changed in the directory"
LDAP_SOURCE = "!ldap"  # the password hash of a directory account: no password matches it
INVITED = "!invited"  # the hash of an account whose owner has not chosen a password yet
DEACTIVATED = "this account is deactivated: ask an admin"


# --- users ------------------------------------------------------------------------------------


def _roles(is_admin: bool) -> list[str]:
    return ["user", "admin"] if is_admin else ["user"]


def _status(row: _Row) -> str:
    if row.deactivated_at_ms is not None:
        return "deactivated"
    return "invited" if row.invited else "active"


def _public(row: _Row, group_names: Iterable[str]) -> dict[str, Any]:
    """What anyone may see of an account: never the password hash."""
    return {
        "username": row.username,
        "email": row.email,
        "roles": _roles(bool(row.is_admin)),
        "groups": sorted(group_names),
        "created_at": iso_ms(row.created_at_ms),
        "source": "ldap" if row.from_ldap else "local",  # see ldap_accounts.py
        "status": _status(row),
        "change_at_sign_in": bool(row.change_at_sign_in),
    }


def _event_data(user: Mapping[str, Any]) -> dict[str, Any]:
    return {key: user[key] for key in ("username", "email", "roles", "groups")}


_USER_COLUMNS = (
    users.c.id,
    users.c.username,
    users.c.email,
    users.c.is_admin,
    users.c.created_at_ms,
    (users.c.password_hash == LDAP_SOURCE).label("from_ldap"),
    (users.c.password_hash == INVITED).label("invited"),
    users.c.change_at_sign_in,
    users.c.deactivated_at_ms,
)


async def _user_row(conn: AsyncConnection, username: str) -> _Row | None:
    query = select(*_USER_COLUMNS).where(users.c.username == username)
    return (await conn.execute(query)).first()


async def _require_user(conn: AsyncConnection, username: str) -> _Row:
    row = await _user_row(conn, username)
    if row is None:
        raise NotFound(f"no user {username!r}", {"username": username})
    return row


async def _groups_by_user(
    conn: AsyncConnection, user_ids: Iterable[int] | None = None
) -> dict[int, list[str]]:
    """Group names of each user (of every user when `user_ids` is None), in one query."""
    query = select(group_members.c.user_id, group_table.c.name).join(
        group_table, group_table.c.id == group_members.c.group_id
    )
    if user_ids is not None:
        query = query.where(group_members.c.user_id.in_(list(user_ids)))
    found: dict[int, list[str]] = defaultdict(list)
    for user_id, name in await conn.execute(query):
        found[user_id].append(name)
    return found


async def _public_by_id(conn: AsyncConnection, row: _Row) -> dict[str, Any]:
    names = (await _groups_by_user(conn, [row.id])).get(row.id, [])
    return _public(row, names)


async def _group_ids_for_new_user(conn: AsyncConnection, names: Iterable[str]) -> set[int]:
    """Ids of every default group plus the named ones; NotFound names any unknown group."""
    wanted = set(names)
    rows = (
        await conn.execute(
            select(group_table.c.id, group_table.c.name).where(
                group_table.c.is_default | group_table.c.name.in_(sorted(wanted))
            )
        )
    ).all()
    unknown = sorted(wanted - {row.name for row in rows})
    if unknown:
        raise NotFound(f"no group {', '.join(map(repr, unknown))}", {"groups": unknown})
    return {row.id for row in rows}


async def create_user(
    conn: AsyncConnection,
    *,
    username: str,
    email: str,
    password: str | None,
    is_admin: bool = False,
    groups: Iterable[str] = (),
    actor: str,
    change_at_sign_in: bool = False,
) -> dict[str, Any]:
    """A new account in every default group and in `groups`; emits `user.created`.

    Without a password it is invited: nobody signs in as it until a password link is used.
    """
    check_user_fields(username=username, email=email, password=password)
    group_ids = await _group_ids_for_new_user(conn, groups)
    if await _user_row(conn, username) is not None:
        raise AlreadyExists(f"user {username!r} exists already", {"username": username})
    password_hash = INVITED
    if password is not None:
        password_hash = await asyncio.to_thread(hash_password, password)
    now = now_ms()
    try:
        result = await conn.execute(
            insert(users).values(
                username=username,
                email=email,
                password_hash=password_hash,
                is_admin=is_admin,
                change_at_sign_in=change_at_sign_in and password is not None,
                created_at_ms=now,
                updated_at_ms=now,
            )
        )
    except IntegrityError as err:  # created by a concurrent request since the check above
        raise AlreadyExists(f"user {username!r} exists already", {"username": username}) from err
    (user_id,) = result.inserted_primary_key or (None,)
    if group_ids:
        await conn.execute(
            insert(group_members), [{"group_id": gid, "user_id": user_id} for gid in group_ids]
        )
    user = await _public_by_id(conn, await _require_user(conn, username))
    await add_event(conn, "user.created", _event_data(user))
    log.info(
        "user %s created",
        username,
        extra={"fields": {"actor": actor, "roles": ",".join(user["roles"])}},
    )
    return user


async def get_user(conn: AsyncConnection, username: str) -> dict[str, Any]:
    return await _public_by_id(conn, await _require_user(conn, username))


async def list_users(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every account, by username (two queries, whatever the number of users)."""
    rows = (await conn.execute(select(*_USER_COLUMNS).order_by(users.c.username))).all()
    names = await _groups_by_user(conn)
    return [_public(row, names.get(row.id, [])) for row in rows]


async def _admin_usernames(conn: AsyncConnection, *, lock: bool = False) -> list[str]:
    query = select(users.c.username).where(users.c.is_admin).order_by(users.c.username)
    if lock:  # PostgreSQL: two concurrent demotions cannot both see another admin
        query = query.with_for_update()
    return list((await conn.execute(query)).scalars())


async def _refuse_last_admin(conn: AsyncConnection, username: str) -> None:
    if await _admin_usernames(conn, lock=True) == [username]:
        raise InvalidRequest(
            f"{username} is the last admin: make another user an admin first",
            {"is_admin": "the last admin cannot be demoted"},
        )


_CHANGED_FIELD = {
    "email": "email",
    "password_hash": "password",
    "is_admin": "roles",
    "change_at_sign_in": "password",
}


async def update_user(
    conn: AsyncConnection,
    username: str,
    *,
    email: str | None = None,
    password: str | None = None,
    is_admin: bool | None = None,
    actor: str,
    change_at_sign_in: bool = False,
) -> dict[str, Any]:
    """Change what is given; emits `user.updated` naming what changed (nothing: no event).

    A new password counts as a change even when it equals the old one (it gets a new salt);
    `change_at_sign_in` (an admin chose it) asks its owner for their own at sign-in.
    Demoting the last admin is refused: nobody could manage Warden any more.
    """
    check_user_fields(email=email, password=password)
    row = await _require_user(conn, username)
    if password is not None and row.from_ldap:
        raise StateConflict(DIRECTORY_PASSWORD, {"username": username})
    values: dict[str, Any] = {}
    if email is not None and email != row.email:
        values["email"] = email
    if is_admin is not None and is_admin != bool(row.is_admin):
        if not is_admin:
            await _refuse_last_admin(conn, username)
        values["is_admin"] = is_admin
    if password is not None:
        values["password_hash"] = await asyncio.to_thread(hash_password, password)
        values["change_at_sign_in"] = change_at_sign_in
    if not values:
        return await _public_by_id(conn, row)
    changed = sorted({_CHANGED_FIELD[column] for column in values})
    await conn.execute(
        update(users).where(users.c.id == row.id).values(**values, updated_at_ms=now_ms())
    )
    user = await get_user(conn, username)
    await add_event(conn, "user.updated", {**_event_data(user), "changed": changed})
    log.info("user %s updated", username, extra={"fields": {"actor": actor, "changed": changed}})
    return user


async def member_groups(conn: AsyncConnection, username: str) -> frozenset[str] | None:
    """Names of the user's groups; None for an unknown user."""
    row = await _user_row(conn, username)
    if row is None:
        return None
    return frozenset((await _groups_by_user(conn, [row.id])).get(row.id, []))


async def actor(conn: AsyncConnection, username: str) -> Actor:
    """Who acts (the username the gateway authenticated); Forbidden for an unknown or
    deactivated user."""
    row = await _user_row(conn, username)
    if row is None:
        raise Forbidden(f"unknown user {username!r}", {"actor": username})
    if row.deactivated_at_ms is not None:
        raise Forbidden(DEACTIVATED, {"actor": username})
    return Actor(username, bool(row.is_admin))


def require_admin(actor: Actor) -> None:
    if not actor.is_admin:
        raise Forbidden("only admins manage access rules, groups and accounts")


async def is_admin(conn: AsyncConnection, username: str) -> bool | None:
    """Whether the user is an admin; None for an unknown user."""
    found = await conn.execute(select(users.c.is_admin).where(users.c.username == username))
    value = found.scalar_one_or_none()
    return None if value is None else bool(value)


async def unknown_usernames(conn: AsyncConnection, usernames: Iterable[str]) -> list[str]:
    """Those of `usernames` that name no account, sorted."""
    wanted = set(usernames)
    known: set[str] = set()
    ordered = sorted(wanted)
    for first in range(0, len(ordered), _CHUNK):
        query = select(users.c.username).where(
            users.c.username.in_(ordered[first : first + _CHUNK])
        )
        known.update((await conn.execute(query)).scalars())
    return sorted(wanted - known)


async def contacts(conn: AsyncConnection, usernames: Iterable[str]) -> dict[str, Any]:
    """E-mail and roles of the known `usernames` (unknown ones are left out), and every admin's
    username and e-mail: whom another service writes to about a user.
    """
    ordered = sorted(set(usernames))
    found: dict[str, dict[str, Any]] = {}
    for first in range(0, len(ordered), _CHUNK):
        rows = await conn.execute(
            select(users.c.username, users.c.email, users.c.is_admin).where(
                users.c.username.in_(ordered[first : first + _CHUNK])
            )
        )
        for row in rows:
            found[row.username] = {"email": row.email, "roles": _roles(bool(row.is_admin))}
    admins = await conn.execute(
        select(users.c.username, users.c.email).where(users.c.is_admin).order_by(users.c.username)
    )
    return {
        "users": {name: found[name] for name in sorted(found)},
        "admins": [{"username": row.username, "email": row.email} for row in admins],
    }


async def count_admins(conn: AsyncConnection) -> int:
    found = await conn.execute(select(func.count()).select_from(users).where(users.c.is_admin))
    return int(found.scalar_one())


async def authenticate(conn: AsyncConnection, username: str, password: str) -> dict[str, Any]:
    """The user's public form when the password matches.

    An unknown user is checked against a dummy hash, so both failures take the same work and
    raise the same AuthenticationFailed.
    """
    row = None
    if isinstance(username, str) and len(username) <= 64:
        query = select(*_USER_COLUMNS, users.c.password_hash).where(users.c.username == username)
        row = (await conn.execute(query)).first()
    stored = None if row is None else row.password_hash
    candidate = password if isinstance(password, str) else ""
    if not await asyncio.to_thread(verify_password, stored, candidate) or row is None:
        raise AuthenticationFailed(WRONG_LOGIN)
    if row.deactivated_at_ms is not None:  # told only to who knows the password
        raise Forbidden(DEACTIVATED, {"username": username})
    return await _public_by_id(conn, row)


# --- groups -----------------------------------------------------------------------------------


_GROUP_COLUMNS = (
    group_table.c.id,
    group_table.c.name,
    group_table.c.description,
    group_table.c.is_default,
)


def _group_public(row: _Row, members: Iterable[str]) -> dict[str, Any]:
    return {
        "name": row.name,
        "description": row.description,
        "is_default": bool(row.is_default),
        "members": sorted(members),
    }


async def _members_by_group(
    conn: AsyncConnection, group_ids: Iterable[int] | None = None
) -> dict[int, list[str]]:
    query = select(group_members.c.group_id, users.c.username).join(
        users, users.c.id == group_members.c.user_id
    )
    if group_ids is not None:
        query = query.where(group_members.c.group_id.in_(list(group_ids)))
    found: dict[int, list[str]] = defaultdict(list)
    for group_id, username in await conn.execute(query):
        found[group_id].append(username)
    return found


async def _group_row(conn: AsyncConnection, name: str) -> _Row | None:
    return (await conn.execute(select(*_GROUP_COLUMNS).where(group_table.c.name == name))).first()


async def _require_group(conn: AsyncConnection, name: str) -> _Row:
    row = await _group_row(conn, name)
    if row is None:
        raise NotFound(f"no group {name!r}", {"group": name})
    return row


async def _group_with_members(conn: AsyncConnection, row: _Row) -> dict[str, Any]:
    return _group_public(row, (await _members_by_group(conn, [row.id])).get(row.id, []))


async def list_groups(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Every group with its members, by name (two queries)."""
    rows = (await conn.execute(select(*_GROUP_COLUMNS).order_by(group_table.c.name))).all()
    members = await _members_by_group(conn)
    return [_group_public(row, members.get(row.id, [])) for row in rows]


async def get_group(conn: AsyncConnection, name: str) -> dict[str, Any]:
    return await _group_with_members(conn, await _require_group(conn, name))


async def create_group(
    conn: AsyncConnection, *, name: str, description: str = "", is_default: bool = False
) -> dict[str, Any]:
    """A new, empty group; a default group is joined by users created from now on."""
    refuse_if(
        {"name": group_name_problem(name), "description": description_problem(description)},
        "group",
    )
    if await _group_row(conn, name) is not None:
        raise AlreadyExists(f"group {name!r} exists already", {"group": name})
    try:
        await conn.execute(
            insert(group_table).values(
                name=name,
                description=description,
                is_default=bool(is_default),
                created_at_ms=now_ms(),
            )
        )
    except IntegrityError as err:  # created by a concurrent request since the check above
        raise AlreadyExists(f"group {name!r} exists already", {"group": name}) from err
    return await get_group(conn, name)


async def update_group(
    conn: AsyncConnection,
    name: str,
    *,
    description: str | None = None,
    is_default: bool | None = None,
) -> dict[str, Any]:
    """Change what is given. Making a group default does not add the existing users to it."""
    refuse_if(
        {"description": None if description is None else description_problem(description)},
        "group",
    )
    row = await _require_group(conn, name)
    values: dict[str, Any] = {}
    if description is not None:
        values["description"] = description
    if is_default is not None:
        values["is_default"] = bool(is_default)
    if values:
        await conn.execute(update(group_table).where(group_table.c.id == row.id).values(**values))
    return await get_group(conn, name)


async def delete_group(conn: AsyncConnection, name: str) -> None:
    """Delete a group; each former member gets a `user.updated` (changed: groups).

    Access rules naming the group keep its name and simply match nobody through it.
    """
    row = await _require_group(conn, name)
    member_ids = list(
        (
            await conn.execute(
                select(group_members.c.user_id).where(group_members.c.group_id == row.id)
            )
        ).scalars()
    )
    await conn.execute(delete(group_members).where(group_members.c.group_id == row.id))
    await conn.execute(delete(group_table).where(group_table.c.id == row.id))
    await _emit_groups_changed(conn, member_ids)
    log.info("group %s deleted", name, extra={"fields": {"members": len(member_ids)}})


async def _emit_groups_changed(conn: AsyncConnection, user_ids: list[int]) -> None:
    """One `user.updated` (changed: groups) per user, from two queries in all."""
    if not user_ids:
        return
    rows = (
        await conn.execute(
            select(*_USER_COLUMNS).where(users.c.id.in_(user_ids)).order_by(users.c.username)
        )
    ).all()
    names = await _groups_by_user(conn, user_ids)
    for row in rows:
        user = _public(row, names.get(row.id, []))
        await add_event(conn, "user.updated", {**_event_data(user), "changed": ["groups"]})


def _insert_membership_once(conn: AsyncConnection, group_id: int, user_id: int) -> Any:
    """INSERT ... ON CONFLICT DO NOTHING: a concurrent identical request adds nothing twice."""
    dialect = postgresql if conn.dialect.name == "postgresql" else sqlite
    return (
        dialect.insert(group_members)
        .values(group_id=group_id, user_id=user_id)
        .on_conflict_do_nothing()
    )


async def add_member(conn: AsyncConnection, group: str, username: str, actor: str) -> bool:
    """Add the user to the group; True when they were not a member yet (then `user.updated`)."""
    group_row = await _require_group(conn, group)
    user_row = await _require_user(conn, username)
    result = await conn.execute(_insert_membership_once(conn, group_row.id, user_row.id))
    if result.rowcount == 0:
        return False
    await _emit_groups_changed(conn, [user_row.id])
    log.info("user %s joined group %s", username, group, extra={"fields": {"actor": actor}})
    return True


async def remove_member(conn: AsyncConnection, group: str, username: str, actor: str) -> bool:
    """Take the user out of the group; True when they were a member (then `user.updated`)."""
    group_row = await _require_group(conn, group)
    user_row = await _require_user(conn, username)
    result = await conn.execute(
        delete(group_members).where(
            (group_members.c.group_id == group_row.id) & (group_members.c.user_id == user_row.id)
        )
    )
    if result.rowcount == 0:
        return False
    await _emit_groups_changed(conn, [user_row.id])
    log.info("user %s left group %s", username, group, extra={"fields": {"actor": actor}})
    return True
