"""The client's tables at a terminal's width: one line per row within 100 columns, short ids
that commands take back, and the words people read (not the API's internal names)."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from rich.console import Console, RenderableType

from services.client.api import ClientError
from services.client.args import UsageError
from services.client.columns import fit_widths
from services.client.hosts import hosts_table
from services.client.idle import notice_line
from services.client.ids import SHORT, match_prefix, short_ids
from services.client.notifications import kind_label
from services.client.render import (
    jobs_table,
    reservation_state,
    reservations_table,
    status_table,
    violations_table,
)
from services.client.reports import period_text, report_table
from services.client.violations import incident_lines

NOW = datetime(2026, 11, 27, 18, 0, tzinfo=UTC)
WIDTH = 100


def lines_of(renderable: RenderableType, width: int = WIDTH) -> list[str]:
    console = Console(width=width, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(renderable)
    return [line.rstrip() for line in console.export_text().splitlines()]


def busy_gpu(host: str, index: int) -> dict[str, Any]:
    return {
        "uuid": f"GPU-{uuid.uuid4()}",
        "host": host,
        "index": index,
        "name": "NVIDIA A100-SXM4-80GB",
        "utilization_gpu_percent": 97.0,
        "memory_used_mib": 79000,
        "memory_total_mib": 81920,
        "processes": [
            {"pid": 123456, "user": "alice", "command": "/usr/bin/python3 /home/a/train.py --lr 1"},
            {"pid": 7, "user": "bob", "command": "python eval.py"},
        ],
        "reservation": {
            "owner": "alice",
            "start": "2026-11-27T10:00:00+00:00",
            "end": "2026-11-27T20:00:00+00:00",
        },
        "next_reservation": {
            "owner": "researcher7",
            "start": "2026-11-29T09:00:00+00:00",
            "end": "2026-11-29T10:00:00+00:00",
        },
        "reachable": True,
    }


def test_the_status_table_is_one_line_per_gpu_at_100_columns() -> None:
    gpus = [busy_gpu(f"sim-{h:03}", i) for h in (1, 2) for i in range(8)]

    lines = lines_of(status_table({"gpus": gpus}, NOW, UTC, width=WIDTH))

    assert len(lines) == 1 + len(gpus)  # the header, then one line per GPU
    assert max(len(line) for line in lines) <= WIDTH
    first = lines[1]
    assert first.startswith("sim-001:0  A100-SXM4-80GB")  # host:index, the model without NVIDIA
    assert "alice till 20:00" in first and "researcher7 Sun" in first
    assert "\u2026" in first  # the processes cut with an ellipsis (whole in --json)


def test_a_wide_terminal_shows_every_cell_whole() -> None:
    lines = lines_of(status_table({"gpus": [busy_gpu("sim-001", 0)]}, NOW, UTC, width=200), 200)
    assert "alice:python3 train.py --lr 1(123456), bob:python eval.py(7)" in lines[1]


def test_violations_show_short_ids_one_line_each_at_100_columns() -> None:
    ids = [str(uuid.uuid4()) for _ in range(5)]
    items = [
        {
            "id": incident,
            "status": "resolved",
            "host": "sim-001",
            "gpu_uuid": "GPU-x",
            "gpu_index": 2,
            "offender": "mallory",
            "owner": "alice",
            "opened_at": "2026-11-20T10:00:00+00:00",
            "resolved_at": "2026-11-20T10:05:00+00:00",
            "resolve_reason": "the processes ended",
            "processes": [{"pid": 77, "command": "python steal.py --all-the-gpus"}],
        }
        for incident in ids
    ]

    lines = lines_of(violations_table(items, NOW, UTC, width=WIDTH))

    assert len(lines) == 1 + len(items)
    assert max(len(line) for line in lines) <= WIDTH
    assert [line.split()[0] for line in lines[1:]] == [incident[:SHORT] for incident in ids]
    assert "sim-001:2" in lines[1] and "Nov 20 10:00" in lines[1]


def test_jobs_put_each_task_on_its_own_line_never_a_literal_backslash_n() -> None:
    job = {
        "id": 3,
        "owner": "bob",
        "name": "two\nlines",  # a name from the API: shown escaped, never as two lines
        "status": "running",
        "tasks": [
            {"index": 0, "host": "sim-001", "gpus": ["a", "b"], "status": "running"},
            {"index": 1, "host": "sim-002", "gpus": ["c"], "status": "running"},
        ],
        "created_at": "2026-11-27T10:30:00+00:00",
        "waiting_reason": None,
    }

    lines = lines_of(jobs_table([job], NOW, UTC, width=WIDTH))

    assert len(lines) == 3
    assert "0: sim-001, 2 GPUs, running" in lines[1] and "two\\nlines" in lines[1]
    assert lines[2].strip() == "1: sim-002, 1 GPU, running"


@pytest.mark.parametrize(
    ("start", "end", "status", "shown"),
    [
        ("2026-11-28T09:00:00+00:00", "2026-11-28T10:00:00+00:00", "active", "upcoming"),
        ("2026-11-27T17:00:00+00:00", "2026-11-27T19:00:00+00:00", "active", "running"),
        ("2026-11-27T15:00:00+00:00", "2026-11-27T16:00:00+00:00", "active", "ended"),
        ("2026-11-28T09:00:00+00:00", "2026-11-28T10:00:00+00:00", "cancelled", "cancelled"),
    ],
)
def test_a_reservation_is_upcoming_until_it_starts(
    start: str, end: str, status: str, shown: str
) -> None:
    assert reservation_state({"start": start, "end": end, "status": status}, NOW) == shown


def test_a_long_title_does_not_wrap_the_reservations_table() -> None:
    item = {
        "id": 12,
        "owner": "alice",
        "status": "active",
        "title": "a sweep " * 20,
        "start": "2026-11-28T09:00:00+00:00",
        "end": "2026-11-28T10:00:00+00:00",
        "gpus": [{"host": "sim-001", "index": i, "uuid": f"u{i}"} for i in range(8)],
    }
    lines = lines_of(reservations_table([item], NOW, UTC, "x" * 150, width=WIDTH))
    assert len(lines) == 3 and max(len(line) for line in lines) <= WIDTH
    assert "upcoming" in lines[2]


def test_fit_widths_cuts_the_widest_column_that_may_shrink_first() -> None:
    # 10 + 40 + 20 and two gaps of 2 = 74: 24 too many for 50
    assert fit_widths([10, 40, 20], [None, 5, 5], 50) == [10, 18, 18]
    assert fit_widths([10, 40, 20], [None, 30, 5], 50) == [10, 30, 6]
    assert fit_widths([10, 40, 20], [None, None, None], 50) == [10, 40, 20]  # none may shrink
    assert fit_widths([10, 40, 20], [None, 5, 5], 200) == [10, 40, 20]


def test_short_ids_are_8_characters_unless_two_share_them() -> None:
    ids = ["abcdef0123-1", "abcdef0199-2", "12345678-x"]
    assert short_ids(ids) == {
        "abcdef0123-1": "abcdef012",
        "abcdef0199-2": "abcdef019",
        "12345678-x": "12345678",
    }


def test_a_prefix_names_one_id_or_says_why_not() -> None:
    ids = ["abcdef0123-1", "abcdef0199-2", "12345678-x"]
    assert match_prefix("12345678", ids, "violation") == "12345678-x"
    assert match_prefix("ABCDEF012", ids, "violation") == "abcdef0123-1"
    with pytest.raises(UsageError, match="ambiguous: 2 violation ids"):
        match_prefix("abcdef01", ids, "violation")
    with pytest.raises(UsageError, match="at least the first 8"):
        match_prefix("1234", ids, "violation")
    with pytest.raises(ClientError, match="no violation"):
        match_prefix("99999999", ids, "violation")


def test_the_report_title_says_the_period_in_dates() -> None:
    assert period_text("2026-11-01T00:00:00+00:00", "2026-12-01T00:00:00+00:00") == (
        "2026-11-01 to 2026-12-01 (UTC)"
    )
    assert period_text("2026-10-28T18:05:09.123+00:00", "2026-11-27T18:05:09.123+00:00") == (
        "2026-10-28 18:05 to 2026-11-27 18:05 UTC"
    )
    columns = [
        "key",
        "reserved_gpu_hours",
        "used_gpu_hours",
        "idle_gpu_hours",
        "idle_share",
        "unreserved_gpu_hours",
        "violations_caused",
        "violations_suffered",
        "jobs",
    ]
    row = {
        "key": "a-rather-long-username",
        "reserved_gpu_hours": 1234.5,
        "used_gpu_hours": 1000.0,
        "idle_gpu_hours": 234.5,
        "idle_share": 0.19,
        "unreserved_gpu_hours": 12.0,
        "violations_caused": 3,
        "violations_suffered": 1,
        "jobs": 42,
    }
    report = {
        "by": "user",
        "columns": columns,
        "rows": [row],
        "totals": {**row, "key": None},
        "start": "2026-11-01T00:00:00+00:00",
        "end": "2026-12-01T00:00:00+00:00",
    }

    lines = lines_of(report_table(report, WIDTH))

    assert lines[0] == "GPU usage by user, 2026-11-01 to 2026-12-01 (UTC)"
    assert max(len(line) for line in lines) <= WIDTH
    assert lines[-1].split()[:3] == ["total", "1,234.5", "1,000.0"]


def test_notification_kinds_are_said_in_words() -> None:
    assert kind_label("job_failed") == "My job failed"
    assert kind_label("some_new_kind") == "some new kind"


def test_an_incident_in_words_with_its_timeline() -> None:
    incident = {
        "id": "0b4c1f9e-aaaa",
        "status": "open",
        "host": "sim-001",
        "gpu_index": 1,
        "gpu_uuid": "GPU-x",
        "offender": "mallory",
        "owner": "alice",
        "reservation_id": 12,
        "reservation_start": "2026-11-27T17:00:00+00:00",
        "reservation_end": "2026-11-27T19:00:00+00:00",
        "opened_at": "2026-11-27T17:30:00+00:00",
        "last_seen_at": "2026-11-27T17:59:00+00:00",
        "resolved_at": None,
        "processes": [{"pid": 9, "command": "python x.py"}],
        "steps": ["terminal", "email"],
        "timeline": [
            {"at": "2026-11-27T17:30:00+00:00", "kind": "opened"},
            {
                "at": "2026-11-27T17:31:00+00:00",
                "kind": "action",
                "step_index": 0,
                "handler": "terminal",
                "target": "mallory",
                "ok": True,
            },
        ],
    }
    lines = incident_lines(incident, NOW, UTC)
    assert lines[0] == "violation 0b4c1f9e-aaaa: open on sim-001:1"
    assert "  reserved by alice (reservation 12, 17:00 to 19:00)" in lines
    assert lines[-1] == "  17:31  action step 0 terminal to mallory: ok"


def test_the_hosts_table_fits_100_columns() -> None:
    hosts = [
        {
            "name": f"gpu-node-{i:02}.cluster.example.org",
            "address": f"gpu-node-{i:02}.infiniband.cluster.example.org",
            "port": 2222,
            "user": "warden-monitor",
            "probe": "ssh",
            "labels": ["a100", "infiniband", "team-vision", "team-nlp"],
            "host_key": None,
            "source": "inventory",
        }
        for i in range(3)
    ]
    lines = lines_of(hosts_table(hosts, WIDTH))
    assert len(lines) == 4 and max(len(line) for line in lines) <= WIDTH
    assert lines[1].startswith("gpu-node-00.cluster.example.org  gpu-node-00")


def test_an_idle_notice_says_its_times_in_local_time() -> None:
    notice = {"id": 12, "title": "rn50", "idle_since": "2026-11-27T16:30:00.123456+00:00",
              "release_at": "2026-11-27T18:30:00.123456+00:00"}  # fmt: skip
    assert notice_line(notice, NOW, UTC) == (
        "#12 rn50: idle since 16:30, released at 18:30 unless you run `warden idle --keep 12`"
    )
