"""Relational storage: one async SQLAlchemy engine per service, one Alembic history each.

Each service owns its tables, its migrations (`services/<service>/migrations`) and its Alembic
version table (`alembic_version_<service>`), so the services can share one PostgreSQL
database or use one SQLite file each (the embedded default) without touching each other.
A service refuses to start on a schema that is not at its latest revision.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Column, DateTime, MetaData, String, Table, event
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

# Services with tables of their own (the gateway keeps nothing durable); also read from here.
from services import SERVICES_WITH_DATABASE
from services.shared.errors import SchemaNotMigrated, ServiceUnavailable
from services.shared.failures import database_reason
from services.shared.storage import sqlite_driver
from services.shared.storage.store import sqlite_in_transaction

_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # services/


CONNECT_TIMEOUT_S = 10.0


def unusable(service: str, url: str, err: BaseException) -> ServiceUnavailable | None:
    """A database error met while starting (or migrating) `service` as one line that names the
    database (without its password), the reason and the key to check; None when `err` is not
    the database's."""
    reason = database_reason(err)
    if reason is None:
        return None
    shown = make_url(url).render_as_string(hide_password=True)
    return ServiceUnavailable(
        f"{service}: cannot use the database at {shown}: {reason}; check storage.database_url",
        {"storage.database_url": reason},
    )


def create_engine(url: str) -> AsyncEngine:
    """An async engine; SQLite files get their folder, WAL, a busy timeout and foreign keys."""
    parsed = make_url(url)
    kwargs: dict[str, Any] = {}
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).expanduser().parent.mkdir(parents=True, exist_ok=True)
        # One trip to aiosqlite's thread per statement (services/shared/storage/sqlite_driver.py).
        kwargs["connect_args"] = {"timeout": 30, "async_creator_fn": sqlite_driver.connect}
    else:
        # LIFO: the connection used last is taken first. Each PostgreSQL connection is a
        # backend with caches of its own (asyncpg's prepared statements, the server's catalog
        # and foreign-key plans); the first writes on a cold one took 7 - 8 ms instead of 1 - 2,
        # and FIFO went round all of them.
        kwargs.update(pool_pre_ping=True, pool_size=10, max_overflow=20, pool_use_lifo=True)
        # A server that accepts TCP but never answers fails a connect after this long, not
        # asyncpg's 60 s; start-up retries, a request gets a 503.
        kwargs["connect_args"] = {"timeout": CONNECT_TIMEOUT_S}
    engine = create_async_engine(url, **kwargs)
    if parsed.get_backend_name() == "sqlite":
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
        _skip_idle_rollbacks(engine)
    return engine


def _skip_idle_rollbacks(engine: AsyncEngine) -> None:
    """A ROLLBACK only where SQLite holds a transaction open. sqlite3 itself does nothing for
    one outside a transaction, but SQLAlchemy asks for one after every read and when the pool
    takes a connection back, and each is a round trip to aiosqlite's thread and back through
    the event loop: under load, a queue's worth of waiting per round trip."""
    dialect = engine.sync_engine.dialect
    rollback = dialect.do_rollback

    def do_rollback(dbapi_connection: Any) -> None:
        if sqlite_in_transaction(dbapi_connection):
            rollback(dbapi_connection)

    dialect.do_rollback = do_rollback  # type: ignore[method-assign]


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def applied_events_table(metadata: MetaData, service: str) -> Table:
    """Ids of the events a service applied: what makes its consumers idempotent."""
    return Table(
        f"{service}_applied_events",
        metadata,
        Column("event_id", String(64), primary_key=True),
        Column("event_type", String(128), nullable=False),
        Column("applied_at", DateTime(timezone=True), nullable=False),
    )


# --- migrations -------------------------------------------------------------------------------


def version_table(service: str) -> str:
    return f"alembic_version_{service}"


def alembic_config(service: str) -> Config:
    if service not in SERVICES_WITH_DATABASE:
        raise ValueError(f"service {service!r} has no database")
    config = Config()
    config.set_main_option("script_location", str(_PACKAGE_ROOT / service / "migrations"))
    config.attributes["service"] = service
    return config


def head_revision(service: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(service)).get_current_head()


def _current_revision(connection: Connection, service: str) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": version_table(service)})
    return context.get_current_revision()


def _upgrade(connection: Connection, service: str, revision: str) -> None:
    config = alembic_config(service)
    config.attributes["connection"] = connection
    command.upgrade(config, revision)


async def upgrade(engine: AsyncEngine, service: str, revision: str = "head") -> str | None:
    """Apply the service's migrations up to `revision`; returns the revision now current.

    On SQLite, foreign keys are off while they run (a pragma that only takes effect outside
    a transaction): a migration that rebuilds a table drops the old one, and with them on
    that drop would delete its children by cascade. They are checked afterwards.
    """
    sqlite = engine.dialect.name == "sqlite"
    async with engine.connect() as conn:
        if sqlite:
            await conn.exec_driver_sql("PRAGMA foreign_keys=OFF")
        try:
            await conn.run_sync(_upgrade, service, revision)
            await conn.commit()
            if sqlite:
                broken = (await conn.exec_driver_sql("PRAGMA foreign_key_check")).all()
                if broken:
                    raise RuntimeError(f"{service} migration broke foreign keys: {broken[:5]}")
        finally:
            if sqlite:
                await conn.exec_driver_sql("PRAGMA foreign_keys=ON")
    async with engine.connect() as conn:
        return await conn.run_sync(_current_revision, service)


async def current_revision(engine: AsyncEngine, service: str) -> str | None:
    async with engine.connect() as conn:
        return await conn.run_sync(_current_revision, service)


async def ensure_migrated(engine: AsyncEngine, service: str) -> None:
    """Refuse to run on a schema that is missing or behind (or ahead of) this code."""
    current = await current_revision(engine, service)
    head = head_revision(service)
    if current != head:
        state = "has no schema yet" if current is None else f"is at revision {current}"
        raise SchemaNotMigrated(
            f"the {service} database {state}; this version needs {head}: "
            "run `warden db upgrade` first",
            {"service": service, "current": current, "expected": head},
        )
