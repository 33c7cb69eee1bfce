"""The monitor judges each poll's GPU health, publishes gpu.health_changed and keeps the
degraded and failed GPUs (FakeHealthStore) so that a restarted monitor goes on where it was."""

from __future__ import annotations

import time
from datetime import timedelta
from pathlib import Path
from typing import Any

from services.monitor.gpu_health import HealthRules, HealthState
from services.monitor.health_store import FakeHealthStore
from services.monitor.monitor import Monitor
from services.monitor.probe import HostReading, parse_probe_output
from services.monitor.readers import FakeReader

RECORDED = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"
LOST = "GPU-3c4d5e6f-7a8b-9c0d-1e2f-3a4b5c6d7e8f"


class Published:
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any]]] = []

    async def __call__(self, event_type: str, data: dict[str, Any]) -> None:
        self.events.append((event_type, data))

    def health(self) -> list[tuple[str, str, str | None]]:
        return [
            (d["uuid"], d["state"], d["previous"])
            for t, d in self.events
            if t == "gpu.health_changed" and d["uuid"] == LOST
        ]


class Fixture:
    def __init__(self, name: str) -> None:
        self.name = name

    def __call__(self) -> HostReading:
        return parse_probe_output((RECORDED / self.name).read_text())


async def poll(monitor: Monitor, reader: FakeReader) -> None:
    await monitor.poll_once(reader, monitor.states[reader.name], time.monotonic())


def monitor_of(reader: FakeReader, published: Published, store: FakeHealthStore) -> Monitor:
    rules = HealthRules(healthy_for=timedelta(hours=1))  # longer than the test
    return Monitor(
        [reader],
        published,
        interval_s=1.0,
        poll_deadline_s=0.5,
        health_rules=rules,
        health_store=store,
    )


async def test_a_failed_gpu_is_kept_across_a_restart() -> None:
    store = FakeHealthStore()
    answer = Fixture("health_v100_before.txt")
    reader = FakeReader("dgx", answer)
    published = Published()
    first = monitor_of(reader, published, store)
    await poll(first, reader)
    assert published.health() == []  # an ok GPU read the first time is not announced
    assert store.rows == {} and store.saved == 0  # an ok GPU has no row
    answer.name = "health_v100_lost.txt"
    await poll(first, reader)
    assert published.health()[-1] == (LOST, "failed", "ok")
    assert store.rows[LOST][2].state is HealthState.FAILED
    since = store.rows[LOST][2].since
    answer.name = "health_v100_before.txt"
    await poll(first, reader)  # healthy again: the wait starts, and is kept
    assert store.rows[LOST][2].healthy_since is not None
    entry = first.snapshot("dgx")["hosts"][0]["gpu_health"][LOST]
    assert entry["state"] == "failed" and entry["index"] == 2

    # Restarted: the GPU is still failed, since when it failed, and not announced as ok.
    again = Published()
    second = monitor_of(FakeReader("dgx", answer), again, store)
    await poll(second, second.readers["dgx"])  # type: ignore[arg-type]
    assert again.health() == []
    kept = second.health["dgx"].gpus[LOST]
    assert kept.state is HealthState.FAILED and kept.since == since


async def test_a_gpu_that_heals_loses_its_row() -> None:
    store = FakeHealthStore()
    answer = Fixture("health_v100_before.txt")  # the GPUs are known first
    reader = FakeReader("dgx", answer)
    published = Published()
    monitor = Monitor(
        [reader],
        published,
        interval_s=1.0,
        poll_deadline_s=0.5,
        health_rules=HealthRules(healthy_for=timedelta(0)),
        health_store=store,
    )
    await poll(monitor, reader)
    answer.name = "health_v100_lost.txt"
    await poll(monitor, reader)
    assert LOST in store.rows
    answer.name = "health_v100_before.txt"
    await poll(monitor, reader)
    assert published.health()[-1] == (LOST, "ok", "failed")
    assert store.rows == {}
