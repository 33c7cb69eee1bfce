"""The accounts' tables on a database of each test's own, SQLite and PostgreSQL: the fixtures of
the accounts' integration tests (tests/integration/test_reservations_accounts.py,
test_accounts_lifecycle.py, test_reservations_attempts.py, test_reservations_calendar_feeds.py,
test_reservations_setup.py).

Import the fixtures into the test module (pytest takes them as the module's own):
`_cheap_passwords` (autouse: real argon2 at cheap parameters, see tests/conftest.py),
`database_url` (a SQLite file in the test's temp dir, then the test's own PostgreSQL
database) and `store` (the reservations service's `Store` on it, migrated). Helpers:
`PASSWORD`, `add_user(store, username, **fields)`, `events(store)` (what waits in the outbox).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from services.accounts import users as accounts
from services.reservations.store import Store
from services.reservations.tables import outbox
from services.shared.contracts import parse_envelope
from services.shared.storage import db

PASSWORD = "correct horse battery"


@pytest.fixture(autouse=True)
def _cheap_passwords(cheap_passwords: None) -> None:
    """Every test here hashes passwords (see tests/conftest.py)."""


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'reservations.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def store(database_url: str) -> AsyncIterator[Store]:
    engine = db.create_engine(database_url)
    try:
        await db.upgrade(engine, "reservations")
        yield Store(engine)
    finally:
        await engine.dispose()


async def add_user(store: Store, username: str = "alice", **extra: Any) -> dict[str, Any]:
    values: dict[str, Any] = {
        "email": f"{username}@lab.example",
        "password": PASSWORD,
        "actor": "admin",
    }
    async with store.write() as conn:
        return await accounts.create_user(conn, username=username, **{**values, **extra})


async def events(store: Store) -> list[tuple[str, dict[str, Any]]]:
    """(type, data) of every event waiting in the outbox, oldest first."""
    async with store.read() as conn:
        rows = (await conn.execute(select(outbox.c.envelope).order_by(outbox.c.id))).scalars()
        envelopes = [parse_envelope(text) for text in rows]
    return [(envelope.type, dict(envelope.data)) for envelope in envelopes]
