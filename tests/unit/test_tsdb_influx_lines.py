"""InfluxMetricsStore's pure parts: line protocol, the bounded buffer, the Flux query."""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

import pytest

from services.monitor.tsdb.base import GpuPoint, HostPoint
from services.monitor.tsdb.influx import LineBuffer, flux_string, line_protocol, series_flux

T0 = datetime(2024, 5, 1, 12, 0, tzinfo=UTC)
T0_MS = 1_714_564_800_000


def test_lines_leave_out_what_was_not_reported() -> None:
    point = HostPoint(
        host="dgx1",
        time=T0,
        cpu_percent=12.5,
        load_1m=None,
        memory_used_mib=1024,  # an int is written as a float: one field type per field
        gpus=(
            GpuPoint(
                "GPU-a", 0, utilization_gpu_percent=0.0, temperature_c=None, power_draw_w=1e20
            ),
            GpuPoint("GPU-b", 1),  # reports nothing: no line
            GpuPoint("GPU-c", 2, fan_speed_percent=float("nan"), clock_sm_mhz=1410.0),
        ),
    )

    assert line_protocol([point]) == [
        f"warden_host,host=dgx1 cpu_percent=12.5,memory_used_mib=1024.0 {T0_MS}",
        f"warden_gpu,gpu_index=0,gpu_uuid=GPU-a,host=dgx1 utilization_gpu_percent=0.0,"
        f"power_draw_w=1e+20 {T0_MS}",
        f"warden_gpu,gpu_index=2,gpu_uuid=GPU-c,host=dgx1 clock_sm_mhz=1410.0 {T0_MS}",
    ]
    assert line_protocol([HostPoint(host="idle", time=T0)]) == []


def test_tag_values_are_escaped() -> None:
    point = HostPoint(
        host="rack 1,a=b",
        time=T0 + timedelta(milliseconds=7),
        cpu_percent=1.0,
        gpus=(GpuPoint("GPU x", 0, temperature_c=40.0),),
    )
    assert line_protocol([point]) == [
        rf"warden_host,host=rack\ 1\,a\=b cpu_percent=1.0 {T0_MS + 7}",
        rf"warden_gpu,gpu_index=0,gpu_uuid=GPU\ x,host=rack\ 1\,a\=b temperature_c=40.0"
        f" {T0_MS + 7}",
    ]


def test_a_full_buffer_drops_the_oldest_with_one_log_line_per_episode(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="warden.monitor.influx")
    buffer = LineBuffer(4)
    buffer.extend(["a", "b", "c"])
    first, batch = buffer.peek(2)
    assert (first, batch) == (0, ["a", "b"])

    buffer.extend(["d", "e", "f"])  # overflow: a and b go
    buffer.extend(["g"])  # still the same episode: c goes
    assert buffer.peek(10) == (3, ["d", "e", "f", "g"])
    assert buffer.dropped == 3
    overflow_lines = [r for r in caplog.records if "dropping the oldest" in r.getMessage()]
    assert len(overflow_lines) == 1

    # the batch taken before the overflow is acknowledged: nothing newer is lost
    buffer.ack(first, len(batch))
    assert buffer.peek(10) == (3, ["d", "e", "f", "g"])
    buffer.ack(3, 2)
    assert buffer.peek(10) == (5, ["f", "g"])
    assert not buffer.overflowing

    buffer.extend(["h", "i", "j"])  # a new episode, a new line
    overflow_lines = [r for r in caplog.records if "dropping the oldest" in r.getMessage()]
    assert len(overflow_lines) == 2
    assert buffer.peek(10) == (6, ["g", "h", "i", "j"])


def test_flux_strings_cannot_break_out() -> None:
    assert flux_string('a"b') == r'"a\"b"'
    assert flux_string("a\\b") == r'"a\\b"'
    assert flux_string("${x}") == r'"\${x}"'


def test_series_flux_aligns_windows_to_start_and_filters_the_series() -> None:
    start = T0 + timedelta(seconds=7)
    flux = series_flux(
        "warden", 'dgx"1', "power_draw_w", start, T0 + timedelta(hours=1), 20, "GPU-a"
    )

    assert 'from(bucket: "warden")' in flux
    assert "range(start: 2024-05-01T12:00:07.000000Z, stop: 2024-05-01T13:00:00.000000Z)" in flux
    assert (
        'r._measurement == "warden_gpu" and r._field == "power_draw_w" and '
        r'r.host == "dgx\"1" and r.gpu_uuid == "GPU-a"'
    ) in flux
    # windows of 20 s, shifted so that one starts exactly at `start` (T0 + 7 s)
    assert f"every: 20000ms, offset: {(T0_MS + 7000) % 20000}ms" in flux
    assert "createEmpty: false" in flux and 'timeSrc: "_start"' in flux
    for fn in ("min", "mean", "max", "count"):
        assert f'stat(fn: {fn}, name: "{fn}")' in flux

    host_flux = series_flux("warden", "dgx1", "cpu_percent", T0, start, 5, None)
    assert 'r._measurement == "warden_host"' in host_flux
    assert "gpu_uuid" not in host_flux
