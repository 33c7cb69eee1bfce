"""The monitor's GPU health rows (`monitor_gpu_health`) on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from services.monitor.gpu_health import GpuHealth, HealthState
from services.monitor.health_store import FakeHealthStore, HealthStore, KeptHealth
from services.shared.storage import db

T0 = datetime(2026, 11, 27, 12, 0, 0, 123000, tzinfo=UTC)


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/monitor.db"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
async def engine(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = db.create_engine(database_url)
    await db.upgrade(engine, "monitor")
    try:
        yield engine
    finally:
        await engine.dispose()


async def test_rows_of_degraded_and_failed_gpus_only(engine: AsyncEngine) -> None:
    store = HealthStore(engine)
    failed = GpuHealth(HealthState.FAILED, "2 uncorrectable ECC error(s)", T0)
    waiting = GpuHealth(
        HealthState.FAILED, "2 uncorrectable ECC error(s)", T0, T0 + timedelta(minutes=1)
    )
    hot = GpuHealth(HealthState.DEGRADED, "HW thermal clock slowdown", T0)
    await store.save("dgx1", "GPU-a", 0, failed)
    await store.save("dgx1", "GPU-b", 1, hot)
    await store.save("dgx2", "GPU-c", 0, hot)
    await store.save("dgx1", "GPU-a", 0, waiting)  # replaced, not added
    assert (await store.load())["dgx1"] == {"GPU-a": (0, waiting), "GPU-b": (1, hot)}
    await store.save("dgx1", "GPU-b", 1, GpuHealth(HealthState.OK, None, T0))
    assert await store.load() == {"dgx1": {"GPU-a": (0, waiting)}, "dgx2": {"GPU-c": (0, hot)}}


async def test_the_first_polls_of_many_hosts_read_the_rows_once() -> None:
    fake = FakeHealthStore()
    hot = GpuHealth(HealthState.DEGRADED, "HW thermal clock slowdown", T0)
    await fake.save("dgx1", "GPU-a", 0, hot)
    kept = KeptHealth(fake, fresh_s=3600.0)
    answers = await asyncio.gather(*(kept.of(f"dgx{i}") for i in range(1, 101)))
    assert answers[0] == {"GPU-a": (0, hot)} and all(a == {} for a in answers[1:])
    assert fake.loads == 1
    stale = KeptHealth(fake, fresh_s=0.0)  # older than fresh_s: read again
    await stale.of("dgx1")
    await asyncio.sleep(0.01)
    await stale.of("dgx2")
    assert fake.loads == 3
