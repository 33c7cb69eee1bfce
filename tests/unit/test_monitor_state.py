"""HostState: which events each poll result causes (transitions, GPU changes, CPU deltas)."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from services.monitor.probe import (
    CpuCounters,
    GpuReading,
    GpuStatus,
    HostReading,
    ProcessReading,
)
from services.monitor.state import HostState, backoff_s
from services.shared.contracts import make_envelope

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def gpu(index: int, uuid: str | None = None, **figures: float | None) -> GpuReading:
    return GpuReading(
        uuid=uuid or f"GPU-{index}",
        index=index,
        name="NVIDIA A100",
        memory_total_mib=81920.0,
        **figures,  # type: ignore[arg-type]
    )


def reading(*gpus: GpuReading, busy: int = 100, total: int = 1000, **kw: object) -> HostReading:
    return HostReading(
        host_time=T0,
        cpu=CpuCounters(busy, total),
        load=(0.5, 0.4, 0.3),
        memory_used_mib=1000.0,
        memory_total_mib=2000.0,
        gpus=gpus,
        **kw,  # type: ignore[arg-type]
    )


def types(events: list[tuple[str, dict]]) -> list[str]:
    return [event_type for event_type, _ in events]


def test_first_reading_discovers_gpus_then_samples_then_processes() -> None:
    state = HostState("h1")
    proc = ProcessReading(
        pid=7,
        gpu_uuid="GPU-0",
        user="bob",
        command="python x.py",
        started_at=T0 - timedelta(minutes=5),
    )
    events = state.on_reading(reading(gpu(0), gpu(1), processes=(proc,)), T0)
    assert types(events) == [
        "gpu.discovered",
        "gpu.discovered",
        "host.sampled",
        "processes.observed",
    ]
    observed = events[-1][1]
    assert observed["processes"] == [
        {
            "gpu_uuid": "GPU-0",
            "pid": 7,
            "user": "bob",
            "command": "python x.py",
            "used_memory_mib": None,
            "started_at": (T0 - timedelta(minutes=5)).isoformat(),
        }
    ]


def test_every_event_fits_its_contract() -> None:
    state = HostState("h1")
    proc = ProcessReading(pid=7, gpu_uuid="GPU-0", user=None, command="x")
    events = state.on_reading(reading(gpu(0, utilization_gpu_percent=None), processes=(proc,)), T0)
    events += state.on_failure("timed out", T0, now=0.0, interval_s=5)
    events += state.on_reading(reading(), T0 + timedelta(seconds=10))
    assert "gpu.disappeared" in types(events)
    for event_type, data in events:
        make_envelope(event_type, data, source="monitor")  # raises if it does not fit


def test_unchanged_gpus_are_announced_once_and_a_changed_one_again() -> None:
    state = HostState("h1")
    state.on_reading(reading(gpu(0), gpu(1)), T0)
    assert types(state.on_reading(reading(gpu(0), gpu(1)), T0)) == [
        "host.sampled",
        "processes.observed",
    ]
    renumbered = state.on_reading(reading(gpu(1, uuid="GPU-0"), gpu(0, uuid="GPU-1")), T0)
    assert types(renumbered)[:2] == ["gpu.discovered", "gpu.discovered"]


def test_a_missing_gpu_disappears_only_when_gpus_could_be_read() -> None:
    state = HostState("h1")
    state.on_reading(reading(gpu(0), gpu(1)), T0)
    failing = reading(gpu_status=GpuStatus.ERROR, gpu_error="driver")
    assert "gpu.disappeared" not in types(state.on_reading(failing, T0))
    events = state.on_reading(reading(gpu(0)), T0)
    assert [data["uuid"] for kind, data in events if kind == "gpu.disappeared"] == ["GPU-1"]
    assert set(state.gpus) == {"GPU-0"}


def test_one_unreachable_and_one_recovered_per_outage() -> None:
    state = HostState("h1")
    state.on_reading(reading(), T0)
    down = [
        state.on_failure("timed out", T0 + timedelta(seconds=i), now=i, interval_s=5)
        for i in range(5)
    ]
    assert [types(events) for events in down] == [["host.unreachable"], [], [], [], []]
    assert down[0][0][1] == {"host": "h1", "since": T0.isoformat(), "reason": "timed out"}
    back = state.on_reading(reading(), T0 + timedelta(minutes=1))
    assert types(back)[0] == "host.recovered"
    assert back[0][1]["down_since"] == T0.isoformat()
    assert types(state.on_reading(reading(), T0)) == ["host.sampled", "processes.observed"]


def test_a_failure_that_needs_a_person_replaces_the_reason_of_an_outage_once() -> None:
    state = HostState("h1")
    state.on_reading(reading(), T0)
    state.on_failure("connection lost", T0, now=0, interval_s=5)
    later = T0 + timedelta(seconds=30)
    assert state.on_failure("connection refused", later, now=30, interval_s=5) == []
    changed = state.on_failure("host key changed", later, now=30, interval_s=5, back_off=True)
    assert changed == [
        ("host.unreachable", {"host": "h1", "since": T0.isoformat(), "reason": "host key changed"})
    ]
    assert state.on_failure("host key changed", later, now=31, interval_s=5, back_off=True) == []
    assert (state.down_since, state.down_reason) == (T0, "host key changed")


def test_a_host_down_from_the_start_is_reported_once() -> None:
    state = HostState("h1")
    assert types(state.on_failure("connection refused", T0, 0, 5)) == ["host.unreachable"]
    assert state.on_failure("connection refused", T0, 1, 5) == []


def test_cpu_percent_comes_from_consecutive_readings_and_not_across_an_outage() -> None:
    state = HostState("h1")
    first = state.on_reading(reading(busy=100, total=1000), T0)
    assert first[-2][1]["cpu_percent"] is None  # nothing to compare with yet
    second = state.on_reading(reading(busy=400, total=2000), T0)
    assert second[-2][1]["cpu_percent"] == pytest.approx(30.0)
    state.on_failure("timed out", T0, 0, 5)
    state.on_reading(reading(busy=900, total=3000), T0)
    assert state.last_sample is not None and state.last_sample["cpu_percent"] is None


def test_not_available_stays_null_in_the_sample() -> None:
    state = HostState("h1")
    state.on_reading(
        reading(gpu(0, utilization_gpu_percent=None, fan_speed_percent=None, temperature_c=41.0)),
        T0,
    )
    assert state.last_sample is not None
    sample = state.last_sample["gpus"][0]
    assert sample["utilization_gpu_percent"] is None
    assert sample["fan_speed_percent"] is None
    assert sample["temperature_c"] == 41.0


@given(
    failures=st.integers(min_value=1, max_value=50),
    interval=st.floats(min_value=0.1, max_value=60),
    seed=st.integers(),
)
def test_backoff_grows_is_capped_and_jittered(failures: int, interval: float, seed: int) -> None:
    delay = backoff_s(failures, interval, cap_s=60.0, rng=random.Random(seed))
    base = min(60.0, interval * 2 ** (failures - 1))
    assert base * 0.5 <= delay <= base


def test_a_host_down_or_hung_is_tried_every_interval_one_needing_a_person_backs_off() -> None:
    down = HostState("h1")
    for i in range(5):
        down.on_failure("timed out", T0 + timedelta(seconds=5 * i), now=5.0 * i, interval_s=5)
    assert down.retry_at == 0.0  # the next tick polls it: fresh within one interval of answering
    refused = HostState("h2")
    for i in range(5):
        refused.on_failure("authentication refused", T0, now=5.0 * i, interval_s=5, back_off=True)
    assert refused.retry_at > 20.0 + 5  # waits longer than an interval before the next try
