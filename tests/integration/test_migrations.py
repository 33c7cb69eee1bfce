"""Per-service Alembic histories on SQLite and PostgreSQL.

Every test runs on three layouts: one SQLite file per service (the embedded default), one
SQLite file shared by all services, and one PostgreSQL database shared by all services (the
test's own database). On the shared layouts the four histories live side by side, each with
its own `alembic_version_<service>` table, and must not see each other.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

from services.cli import main
from services.shared.config import StorageSettings
from services.shared.errors import SchemaNotMigrated
from services.shared.storage import db

SERVICES = db.SERVICES_WITH_DATABASE


@pytest.fixture(
    params=[
        pytest.param("sqlite-per-service", id="sqlite-per-service"),
        pytest.param("sqlite-shared", id="sqlite-shared"),
        pytest.param("postgres", id="postgres", marks=pytest.mark.postgres),
    ]
)
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> StorageSettings:
    """Where the services' databases are; `database_url_for(service)` gives each one's URL."""
    if request.param == "sqlite-per-service":
        return StorageSettings(data_dir=tmp_path / "data")
    if request.param == "sqlite-shared":
        url = f"sqlite+aiosqlite:///{tmp_path / 'data' / 'warden.db'}"
        return StorageSettings(data_dir=tmp_path / "data", database_url=url)
    return StorageSettings(
        data_dir=tmp_path / "data", database_url=request.getfixturevalue("pg_url")
    )


@pytest.fixture
async def engines(storage: StorageSettings) -> AsyncIterator[dict[str, AsyncEngine]]:
    made = {name: db.create_engine(storage.database_url_for(name)) for name in SERVICES}
    try:
        yield made
    finally:
        for engine in made.values():
            await engine.dispose()


async def table_names(engine: AsyncEngine) -> set[str]:
    async with engine.connect() as conn:
        return set(await conn.run_sync(lambda sync: sa.inspect(sync).get_table_names()))


async def versions(engine: AsyncEngine, service: str) -> list[str]:
    async with engine.connect() as conn:
        rows = await conn.execute(sa.text(f"SELECT version_num FROM {db.version_table(service)}"))
        return [row[0] for row in rows]


async def upgrade_all(engines: dict[str, AsyncEngine]) -> None:
    for name, engine in engines.items():
        assert await db.upgrade(engine, name) == db.head_revision(name)


def test_every_service_has_its_own_history() -> None:
    heads = {name: db.head_revision(name) for name in SERVICES}
    assert all(heads.values())
    assert len(set(heads.values())) == len(SERVICES)  # revision ids never collide
    with pytest.raises(ValueError, match="no database"):
        db.alembic_config("gateway")


async def test_upgrade_brings_every_service_to_head(engines: dict[str, AsyncEngine]) -> None:
    for name, engine in engines.items():
        assert await db.current_revision(engine, name) is None

    await upgrade_all(engines)

    for name, engine in engines.items():
        assert await db.current_revision(engine, name) == db.head_revision(name)
        await db.ensure_migrated(engine, name)  # does not raise
        tables = await table_names(engine)
        assert f"{name}_applied_events" in tables
        assert db.version_table(name) in tables
        assert "alembic_version" not in tables  # never Alembic's shared default table
        assert await versions(engine, name) == [db.head_revision(name)]


@pytest.mark.parametrize(
    "storage",
    ["sqlite-shared", pytest.param("postgres", marks=pytest.mark.postgres)],
    indirect=True,
)
async def test_histories_sharing_one_database_do_not_collide(
    storage: StorageSettings, engines: dict[str, AsyncEngine]
) -> None:
    assert "{service}" not in storage.database_url  # one database for all four
    engine = engines["jobs"]

    assert await db.upgrade(engine, "jobs") == db.head_revision("jobs")

    # jobs being migrated does not make the others look migrated ...
    for name in SERVICES:
        if name != "jobs":
            assert await db.current_revision(engine, name) is None
            with pytest.raises(SchemaNotMigrated):
                await db.ensure_migrated(engine, name)

    # ... and migrating them all leaves each history with its own single row.
    await upgrade_all(engines)
    tables = await table_names(engine)
    for name in SERVICES:
        assert {f"{name}_applied_events", db.version_table(name)} <= tables
        assert await versions(engine, name) == [db.head_revision(name)]
        await db.ensure_migrated(engine, name)


async def test_upgrading_twice_is_a_no_op(engines: dict[str, AsyncEngine]) -> None:
    await upgrade_all(engines)
    before = {name: await table_names(engine) for name, engine in engines.items()}
    for name, engine in engines.items():
        async with engine.begin() as conn:
            await conn.execute(
                sa.text(
                    f"INSERT INTO {name}_applied_events (event_id, event_type, applied_at) "
                    "VALUES (:id, :type, :at)"
                ),
                {"id": f"evt-{name}", "type": "test.kept", "at": datetime.now(UTC)},
            )

    await upgrade_all(engines)

    for name, engine in engines.items():
        assert await table_names(engine) == before[name]
        assert await versions(engine, name) == [db.head_revision(name)]
        async with engine.connect() as conn:
            kept = await conn.scalars(sa.text(f"SELECT event_id FROM {name}_applied_events"))
            assert list(kept) == [f"evt-{name}"]


async def test_ensure_migrated_refuses_a_missing_schema(engines: dict[str, AsyncEngine]) -> None:
    with pytest.raises(SchemaNotMigrated) as refused:
        await db.ensure_migrated(engines["reservations"], "reservations")

    assert "has no schema yet" in refused.value.message
    assert "warden db upgrade" in refused.value.message
    assert refused.value.details == {
        "service": "reservations",
        "current": None,
        "expected": db.head_revision("reservations"),
    }


async def test_ensure_migrated_refuses_a_schema_at_another_revision(
    engines: dict[str, AsyncEngine],
) -> None:
    engine = engines["violations"]
    await db.upgrade(engine, "violations")
    async with engine.begin() as conn:
        await conn.execute(
            sa.text(f"UPDATE {db.version_table('violations')} SET version_num = 'violations_9999'")
        )

    with pytest.raises(SchemaNotMigrated) as refused:
        await db.ensure_migrated(engine, "violations")

    assert "is at revision violations_9999" in refused.value.message
    assert refused.value.details["current"] == "violations_9999"


# --- through the CLI --------------------------------------------------------------------------


def test_cli_db_upgrade_then_current(
    storage: StorageSettings,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("WARDEN_STORAGE_DATA_DIR", str(storage.data_dir))
    monkeypatch.setenv("WARDEN_STORAGE_DATABASE_URL", storage.database_url)
    monkeypatch.setenv("WARDEN_AUTH_JWT_SECRET", "x" * 48)
    monkeypatch.setenv("WARDEN_LOG_LEVEL", "warning")

    assert main(["db", "current"]) == 0
    out = capsys.readouterr().out
    for name in SERVICES:
        assert f"{name}: at nothing (needs upgrade to {db.head_revision(name)})" in out

    assert main(["db", "upgrade", "jobs"]) == 0
    assert capsys.readouterr().out.strip() == f"jobs: at {db.head_revision('jobs')}"

    assert main(["db", "upgrade"]) == 0
    assert main(["db", "upgrade"]) == 0  # again: nothing to do, still fine
    assert main(["db", "current"]) == 0
    out = capsys.readouterr().out
    for name in SERVICES:
        assert f"{name}: at {db.head_revision(name)} (up to date)" in out


async def test_a_deleted_rule_or_job_never_gives_its_id_to_the_next_one(
    engines: dict[str, AsyncEngine],
) -> None:
    """On SQLite too (AUTOINCREMENT, jobs_0003 and reservations_0005 rebuild the tables with
    it); a job's tasks survive the rebuild of their parent table."""
    from services.jobs import tables as jobs
    from services.reservations import tables as reservations

    engine = engines["jobs"]
    await db.upgrade(engine, "jobs", "jobs_0002")
    job = {"owner": "alice", "name": "train", "spec": "{}", "status": "created"}
    times = {"created_at_ms": 1, "updated_at_ms": 1}
    async with engine.begin() as conn:
        first = (
            await conn.execute(
                sa.insert(jobs.jobs).values(**job, **times).returning(jobs.jobs.c.id)
            )
        ).scalar_one()
        await conn.execute(
            sa.insert(jobs.tasks).values(job_id=first, task_index=0, status="created")
        )
    await db.upgrade(engine, "jobs")
    async with engine.begin() as conn:
        assert (
            await conn.execute(sa.select(sa.func.count()).select_from(jobs.tasks))
        ).scalar() == 1
        newest = (
            await conn.execute(
                sa.insert(jobs.jobs).values(**job, **times).returning(jobs.jobs.c.id)
            )
        ).scalar_one()
        await conn.execute(sa.delete(jobs.jobs).where(jobs.jobs.c.id == newest))
        after = (
            await conn.execute(
                sa.insert(jobs.jobs).values(**job, **times).returning(jobs.jobs.c.id)
            )
        ).scalar_one()
    assert after > newest > first

    rules = engines["reservations"]
    await db.upgrade(rules, "reservations")
    rule = {
        "name": "r",
        "users": [],
        "groups": [],
        "hosts": [],
        "gpus": [],
        "windows": [],
        "valid_from_ms": 0,
        "created_by": "admin",
        "created_at_ms": 1,
        "updated_at_ms": 1,
    }
    table = reservations.access_rules
    async with rules.begin() as conn:
        newest = (
            await conn.execute(sa.insert(table).values(**rule).returning(table.c.id))
        ).scalar_one()
        await conn.execute(sa.delete(table).where(table.c.id == newest))
        after = (
            await conn.execute(sa.insert(table).values(**rule).returning(table.c.id))
        ).scalar_one()
    assert after > newest
