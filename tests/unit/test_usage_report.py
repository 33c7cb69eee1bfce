"""Usage reports: each service's aggregation and the gateway's grouping (pure)."""

from __future__ import annotations

import csv
import io

from services.gateway.usage_report import compose, to_csv
from services.jobs.usage_report import job_facts
from services.reservations.usage.report import held_until_ms, idle_share, reservation_facts
from services.shared.usage_report import HOUR_MS, overlap_ms
from services.violations.usage_report import incident_facts

H = HOUR_MS


def test_overlap_is_the_part_inside_the_period() -> None:
    assert overlap_ms(0, 10, 5, 20) == 5
    assert overlap_ms(0, 10, 10, 20) == 0
    assert overlap_ms(12, 15, 10, 20) == 3
    assert overlap_ms(30, 40, 10, 20) == 0


def test_a_cancelled_booking_held_its_gpus_until_it_was_cancelled() -> None:
    assert held_until_ms("active", 100, None) == 100
    assert held_until_ms("cancelled", 100, 40) == 40
    assert held_until_ms("cancelled", 100, 400) == 100


def test_idle_share_is_none_without_samples() -> None:
    assert idle_share(None, None) is None
    assert idle_share(0, 0) is None
    assert idle_share(10, 4) == 0.4


def test_reserved_time_splits_into_used_and_idle_by_the_samples() -> None:
    rows = [
        # alice: 2 GPUs for 4 h, a quarter of the samples idle; half of it in the period
        ("alice", "g0", "active", -2 * H, 2 * H, None, 100, 25),
        ("alice", "g1", "active", -2 * H, 2 * H, None, 100, 25),
        # bob: 1 h never measured, and a booking cancelled before it started
        ("bob", "g0", "active", 3 * H, 4 * H, None, None, None),
        ("bob", "g1", "cancelled", 5 * H, 6 * H, 1 * H, None, None),
    ]
    facts = reservation_facts(rows, {"g0": "h1", "g1": "h1"}, 0, 10 * H)
    by_key = {(f["user"], f["gpu_uuid"]): f for f in facts}
    assert by_key["alice", "g0"] == {
        "user": "alice",
        "host": "h1",
        "gpu_uuid": "g0",
        "reserved_gpu_hours": 2.0,
        "idle_gpu_hours": 0.5,
        "used_gpu_hours": 1.5,
    }
    assert by_key["bob", "g0"] == {
        "user": "bob",
        "host": "h1",
        "gpu_uuid": "g0",
        "reserved_gpu_hours": 1.0,
    }
    assert ("bob", "g1") not in by_key


def test_incidents_count_where_they_were_opened_and_their_time_as_unreserved_use() -> None:
    rows = [
        # carol on alice's GPU for 2 h, resolved; opened in the period
        ("carol", "alice", "h1", "g0", 1 * H, 1 * H, 3 * H, 3 * H),
        # dave on a free GPU (strict mode), still open: counted to its last sighting
        ("dave", None, "h1", "g1", 2 * H, 2 * H, 2 * H + H // 2, None),
        # opened before the period, running into it: time counts, the incident does not
        ("carol", "bob", "h2", "g2", -H, -H, H, H),
    ]
    facts = {(f["user"], f["gpu_uuid"]): f for f in incident_facts(rows, 0, 10 * H)}
    assert facts["carol", "g0"]["violations_caused"] == 1
    assert facts["carol", "g0"]["unreserved_gpu_hours"] == 2.0
    assert facts["alice", "g0"] == {
        "user": "alice",
        "host": "h1",
        "gpu_uuid": "g0",
        "violations_suffered": 1,
    }
    assert facts["dave", "g1"]["unreserved_gpu_hours"] == 0.5
    assert facts["carol", "g2"] == {
        "user": "carol",
        "host": "h2",
        "gpu_uuid": "g2",
        "unreserved_gpu_hours": 1.0,
        "violations_caused": 0,
    }
    assert ("bob", "g2") not in facts


def test_a_job_counts_once_and_its_unreserved_runs_as_gpu_hours() -> None:
    runs = [
        # job 1 (queued, no reservation): two runs on 2 GPUs, 1 h each
        (1, "alice", None, "h1", ["g0", "g1"], 0, H),
        (1, "alice", None, "h1", ["g0", "g1"], 2 * H, 3 * H),
        # job 2 inside a reservation, still running: a job, no unreserved hours
        (2, "bob", 7, "h1", ["g2"], 4 * H, None),
        # job 3 ended before the period
        (3, "bob", None, "h1", ["g2"], -3 * H, -2 * H),
        # job 4: a CPU job
        (4, "bob", None, "h2", [], H, 2 * H),
    ]
    facts = {(f["user"], f["gpu_uuid"]): f for f in job_facts(runs, 0, 10 * H)}
    assert facts["alice", "g0"] == {
        "user": "alice",
        "host": "h1",
        "gpu_uuid": "g0",
        "jobs": 1,
        "unreserved_gpu_hours": 2.0,
    }
    assert facts["alice", "g1"]["unreserved_gpu_hours"] == 2.0
    assert "jobs" not in facts["alice", "g1"]
    assert facts["bob", "g2"] == {"user": "bob", "host": "h1", "gpu_uuid": "g2", "jobs": 1}
    assert facts["bob", None] == {"user": "bob", "host": "h2", "gpu_uuid": None, "jobs": 1}


FACTS = [
    {"user": "alice", "host": "h1", "gpu_uuid": "g0", "reserved_gpu_hours": 4.0,
     "used_gpu_hours": 3.0, "idle_gpu_hours": 1.0},
    {"user": "bob", "host": "h2", "gpu_uuid": "g2", "reserved_gpu_hours": 2.0},
    {"user": "bob", "host": "h1", "gpu_uuid": "g0", "violations_caused": 1,
     "unreserved_gpu_hours": 0.5},
    {"user": "alice", "host": "h1", "gpu_uuid": "g0", "violations_suffered": 1},
    {"user": "carol", "host": "h2", "gpu_uuid": None, "jobs": 2},
]  # fmt: skip
GPUS = [
    {"uuid": "g0", "host": "h1", "model": "NVIDIA A100"},
    {"uuid": "g2", "host": "h2", "model": "NVIDIA H100"},
]
GROUPS = [{"user": "alice", "groups": ["ml", "vision"]}, {"user": "bob", "groups": ["ml"]}]


def test_rows_by_user_with_totals() -> None:
    report = compose(FACTS, GPUS, GROUPS, "user")
    rows = {row["key"]: row for row in report["rows"]}
    assert list(rows) == ["alice", "bob", "carol"]
    assert rows["alice"]["idle_share"] == 0.25
    assert rows["alice"]["violations_suffered"] == 1
    assert rows["bob"]["idle_share"] is None  # reserved, never measured
    assert rows["bob"]["unreserved_gpu_hours"] == 0.5
    assert report["totals"]["reserved_gpu_hours"] == 6.0
    assert report["totals"]["jobs"] == 2
    assert report["totals"]["key"] == "total"


def test_rows_by_group_host_and_model() -> None:
    by_group = {row["key"]: row for row in compose(FACTS, GPUS, GROUPS, "group")["rows"]}
    assert by_group["ml"]["reserved_gpu_hours"] == 6.0  # alice and bob
    assert by_group["vision"]["reserved_gpu_hours"] == 4.0  # alice alone
    assert by_group["(none)"]["jobs"] == 2  # carol is in no group
    by_host = {row["key"]: row for row in compose(FACTS, GPUS, GROUPS, "host")["rows"]}
    assert by_host["h1"]["reserved_gpu_hours"] == 4.0
    assert by_host["h2"]["jobs"] == 2
    by_model = {row["key"]: row for row in compose(FACTS, GPUS, GROUPS, "gpu_model")["rows"]}
    assert by_model["NVIDIA H100"]["reserved_gpu_hours"] == 2.0
    assert by_model["(unknown)"]["jobs"] == 2  # ran on no GPU


def test_one_user_sees_only_their_own_figures() -> None:
    report = compose(FACTS, GPUS, GROUPS, "host", only_user="bob")
    assert report["totals"]["reserved_gpu_hours"] == 2.0
    assert report["totals"]["violations_suffered"] == 0
    assert {row["key"] for row in report["rows"]} == {"h1", "h2"}


def test_csv_has_a_header_the_rows_and_the_total() -> None:
    report = compose(FACTS, GPUS, GROUPS, "user")
    parsed = list(csv.DictReader(io.StringIO(to_csv(report, "user"))))
    assert [row["user"] for row in parsed] == ["alice", "bob", "carol", "total"]
    assert parsed[0]["idle_share"] == "0.25"
    assert parsed[1]["idle_share"] == ""
    assert float(parsed[3]["reserved_gpu_hours"]) == 6.0
