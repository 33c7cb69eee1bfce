"""One-time password links and accounts that end (services.accounts.password_links, lifecycle)
on SQLite and PostgreSQL: a link works once and until it expires, a newer one replaces it, a
deactivated or deleted account signs in nowhere and its sessions end with one event. The
database fixtures are tests/support/accounts_store.py's, imported.
"""

# ruff: noqa: F811 (the imported `store` fixture is every test's parameter)

from __future__ import annotations

import pytest
from sqlalchemy import select

from services.accounts import lifecycle, password_links, sessions
from services.accounts import users as accounts
from services.accounts.api import Actor
from services.reservations.store import Store, now_ms
from services.reservations.tables import group_members
from services.reservations.tables import password_links as link_rows
from services.shared.errors import AuthenticationFailed, Forbidden, InvalidRequest, NotFound
from tests.support.accounts_store import (  # noqa: F401 (fixtures)
    PASSWORD,
    _cheap_passwords,
    add_user,
    database_url,
    events,
    store,
)

ADMIN = Actor("root", True)
WEEK_MS = 7 * 86_400_000


async def invite(store: Store, username: str, *, ttl_ms: int = WEEK_MS, now: int = 0) -> str:
    async with store.write() as conn:
        await accounts.create_user(
            conn, username=username, email=f"{username}@lab.example", password=None, actor="root"
        )
        link = await password_links.issue(
            conn, username, "invite", actor="root", ttl_ms=ttl_ms, now=now or now_ms()
        )
    return str(link["token"])


async def test_an_invitation_link_sets_the_password_once(store: Store) -> None:
    token = await invite(store, "ines")
    async with store.read() as conn:
        assert (await accounts.get_user(conn, "ines"))["status"] == "invited"
        with pytest.raises(AuthenticationFailed):
            await accounts.authenticate(conn, "ines", "!invited")
        assert (await password_links.peek(conn, token, now_ms()))["username"] == "ines"
        stored = (await conn.execute(select(link_rows.c.token_hash))).scalars().all()
    assert token not in stored  # only its hash is kept
    async with store.write() as conn:
        with pytest.raises(InvalidRequest):
            await password_links.use(conn, token, "short", now_ms())
    async with store.write() as conn:
        user = await password_links.use(conn, token, PASSWORD, now_ms())
    assert user["status"] == "active"
    async with store.write() as conn:
        with pytest.raises(Forbidden):
            await password_links.use(conn, token, "another password", now_ms())
    async with store.read() as conn:
        assert (await accounts.authenticate(conn, "ines", PASSWORD))["username"] == "ines"


async def test_an_expired_or_replaced_link_is_refused(store: Store) -> None:
    now = now_ms()
    old = await invite(store, "olaf", ttl_ms=60_000, now=now)
    async with store.read() as conn:
        with pytest.raises(Forbidden):
            await password_links.peek(conn, old, now + 60_000)
    async with store.write() as conn:
        newer = await password_links.issue(
            conn, "olaf", "reset", actor="root", ttl_ms=WEEK_MS, now=now
        )
    async with store.read() as conn:
        with pytest.raises(Forbidden):
            await password_links.peek(conn, old, now)
        assert (await password_links.peek(conn, newer["token"], now))["purpose"] == "reset"


async def test_deactivation_ends_sessions_and_sign_in_and_activation_undoes_it(
    store: Store,
) -> None:
    await add_user(store, "dora")
    async with store.write() as conn:
        opened = await sessions.open_session(conn, "dora", 60_000, now_ms())
        user = await lifecycle.set_active(conn, ADMIN, "dora", active=False, now=now_ms())
    assert user["status"] == "deactivated"
    async with store.read() as conn:
        with pytest.raises(Forbidden):
            await accounts.authenticate(conn, "dora", PASSWORD)
        with pytest.raises(Forbidden):
            await accounts.actor(conn, "dora")
    async with store.write() as conn:
        refreshed = await sessions.rotate(conn, opened["refresh_token"], 60_000, now_ms())
    assert refreshed.token is None
    found = [(kind, data) for kind, data in await events(store) if kind != "user.created"]
    assert [kind for kind, _ in found] == ["session.revoked", "user.updated"]
    assert found[1][1]["changed"] == ["status"]
    async with store.write() as conn:
        await lifecycle.set_active(conn, ADMIN, "dora", active=True, now=now_ms())
        assert (await accounts.authenticate(conn, "dora", PASSWORD))["status"] == "active"


async def test_delete_removes_the_account_and_its_memberships(store: Store) -> None:
    await add_user(store, "dan")
    async with store.write() as conn:
        await lifecycle.delete_user(conn, ADMIN, "dan", now_ms())
    async with store.read() as conn:
        with pytest.raises(NotFound):
            await accounts.get_user(conn, "dan")
        assert (await conn.execute(select(group_members))).all() == []
    assert (await events(store))[-1][0] == "user.deleted"


async def test_nobody_ends_their_own_account_nor_the_last_active_admin(store: Store) -> None:
    await add_user(store, "root", is_admin=True)
    async with store.write() as conn:
        with pytest.raises(InvalidRequest):
            await lifecycle.set_active(conn, ADMIN, "root", active=False, now=now_ms())
        with pytest.raises(InvalidRequest):
            await lifecycle.delete_user(conn, Actor("other", True), "root", now_ms())
