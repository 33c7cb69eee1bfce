"""The one place accounts are made outside the RPC methods: `warden user add` and `warden
init`'s first admin (`services/cli_accounts.py`), `warden demo`'s accounts
(`services/reservations/seeding.py`), the test systems' (`tests/support/accounts.py`) and the
benches' (`bench/_common.py`). Written straight to the database the accounts live in (the
reservations one): no service needs to run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users
from services.shared.config import Settings
from services.shared.storage import db
from services.shared.storage.store import Store

# The service whose database holds the accounts.
DATABASE = "reservations"


@dataclass(frozen=True)
class NewAccount:
    username: str
    email: str
    password: str
    is_admin: bool = False
    groups: Sequence[str] = ()  # besides every default group


async def create_accounts(
    conn: AsyncConnection, accounts: Iterable[NewAccount], *, actor: str
) -> list[dict[str, Any]]:
    """Each account made in the caller's transaction, with its `user.created` event (a name
    taken already: AlreadyExists); their public forms, in order."""
    return [
        await users.create_user(
            conn,
            username=account.username,
            email=account.email,
            password=account.password,
            is_admin=account.is_admin,
            groups=account.groups,
            actor=actor,
        )
        for account in accounts
    ]


async def create_or_reset(conn: AsyncConnection, account: NewAccount, *, actor: str) -> None:
    """The account exists afterwards with this password and admin role: made when new, else
    given the password (and the role, where it differs; its e-mail and groups stay)."""
    found = await users.is_admin(conn, account.username)
    if found is None:
        await create_accounts(conn, [account], actor=actor)
        return
    await users.update_user(
        conn,
        account.username,
        password=account.password,
        is_admin=account.is_admin if found != account.is_admin else None,
        actor=actor,
    )


@asynccontextmanager
async def accounts_database(settings: Settings) -> AsyncIterator[Store]:
    """The database of the accounts, refused unless migrated (it says to run `warden db
    upgrade`)."""
    engine = db.create_engine(settings.storage.database_url_for(DATABASE))
    try:
        await db.ensure_migrated(engine, DATABASE)
        yield Store(engine)
    finally:
        await engine.dispose()


async def migrate_with_accounts(
    settings: Settings, accounts: Iterable[NewAccount], *, actor: str
) -> None:
    """Every service's database migrated, and `accounts` made in theirs (a fresh system for
    the tests and the benches)."""
    for name in db.SERVICES_WITH_DATABASE:
        engine = db.create_engine(settings.storage.database_url_for(name))
        try:
            await db.upgrade(engine, name)
            if name == DATABASE:
                async with Store(engine).write() as conn:
                    await create_accounts(conn, accounts, actor=actor)
        finally:
            await engine.dispose()
