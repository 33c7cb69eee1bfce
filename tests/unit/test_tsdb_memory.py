"""The in-memory metrics store as a fake: it records batches and can be told to fail.

(Its answers are held to the contract in tests/integration/test_tsdb_contract.py.)
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.monitor.tsdb import HostPoint, MemoryMetricsStore

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)


async def test_the_fake_records_what_it_was_given() -> None:
    store = MemoryMetricsStore()
    await store.start()
    batch = [HostPoint("a", T0, cpu_percent=1.0), HostPoint("b", T0, cpu_percent=2.0)]

    await store.write(batch)
    await store.write([])

    assert store.batches == [tuple(batch), ()]
    assert store.points == batch
    await store.close()
    assert store.started and store.closed


async def test_the_fake_fails_on_demand_and_keeps_nothing() -> None:
    store = MemoryMetricsStore()
    store.failure = ConnectionError("store down")

    with pytest.raises(ConnectionError):
        await store.write([HostPoint("a", T0, cpu_percent=1.0)])

    store.failure = None
    assert store.batches == []
    assert await store.series("a", "cpu_percent", T0, datetime(2024, 5, 2, tzinfo=UTC), 60) == []
