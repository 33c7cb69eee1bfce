"""The transitions a monitor replica keeps of hosts others poll: a host taken over starts from
them, so moving a host between replicas announces nothing again (pure)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.monitor.fleet_view import FleetView, transitions
from services.monitor.state import HostState
from tests.unit.test_monitor_state import gpu, reading, types

T0 = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


def polled_elsewhere(*events_of: tuple[HostState, list[tuple[str, dict]]]) -> FleetView:
    view = FleetView()
    for _, events in events_of:
        for event_type, data in events:
            view.apply(event_type, data)
    return view


def test_a_host_taken_over_announces_its_gpus_only_once() -> None:
    before = HostState("h1")
    view = polled_elsewhere((before, before.on_reading(reading(gpu(0), gpu(1)), T0)))
    after = view.seed("h1")
    assert after is not None
    events = after.on_reading(reading(gpu(0), gpu(1)), T0 + timedelta(seconds=5))
    assert types(events) == ["host.sampled", "processes.observed"]
    # A GPU that really changed meanwhile is still announced.
    events = after.on_reading(reading(gpu(0), gpu(2)), T0 + timedelta(seconds=10))
    assert types(events)[:2] == ["gpu.discovered", "gpu.disappeared"]


def test_a_host_down_when_taken_over_is_not_down_twice_and_recovers_once() -> None:
    before = HostState("h1")
    first = before.on_reading(reading(gpu(0)), T0)
    down = before.on_failure("timed out", T0 + timedelta(seconds=5), 0.0, 5.0)
    view = polled_elsewhere((before, first), (before, down))
    after = view.seed("h1")
    assert after is not None and after.reachable is False
    assert after.on_failure("timed out", T0 + timedelta(seconds=10), 0.0, 5.0) == []
    events = after.on_reading(reading(gpu(0)), T0 + timedelta(seconds=15))
    assert types(events) == ["host.recovered", "host.sampled", "processes.observed"]
    assert events[0][1]["down_since"] == (T0 + timedelta(seconds=5)).isoformat()


def test_what_a_joining_replica_is_told_seeds_the_same() -> None:
    before = HostState("h1")
    before.on_reading(reading(gpu(0), gpu(1)), T0)
    view = FleetView()
    view.load([transitions(before)])
    after = view.seed("h1")
    assert after is not None and after.gpus == before.gpus
    assert view.seed("unknown") is None
