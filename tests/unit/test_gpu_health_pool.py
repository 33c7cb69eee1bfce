"""A failed GPU leaves the pool: the queue never places on it, a booking of it is refused
(422, gpu_failed), its owners and the admins are told (pure parts)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from services.client.render import NONE, status_rows
from services.gateway.fleet_board import compose_hosts
from services.jobs.queue.model import Demand, Gpu, QueuedJob, QueueState, Start, Waiting
from services.jobs.queue.scheduler import schedule
from services.notifications.producers import gpu_failed_note
from services.reservations.rules.domain import Gpu as BookableGpu
from services.reservations.rules.gpu_health import failed_gpu_note, failed_gpu_refusals
from services.reservations.rules.refusals import refusal_error, removed_host_refusals
from services.shared.errors import ValidationFailed
from services.shared.http_errors import STATUS_BY_CODE

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def queue_pass(gpus: list[Gpu], *demands: Demand) -> dict[int, Start | Waiting]:
    jobs = [QueuedJob(i + 1, "ann", NOW - timedelta(hours=1), (d,)) for i, d in enumerate(demands)]
    decisions = schedule(QueueState(NOW, {g.uuid: g for g in gpus}, {}, jobs))
    return {d.job_id: d for d in decisions if isinstance(d, Start | Waiting)}


def test_any_n_skips_a_failed_gpu() -> None:
    gpus = [
        Gpu("a-0", "a", 0, False, failed="2 uncorrectable ECC error(s)"),
        Gpu("a-1", "a", 1, False),
    ]
    decided = queue_pass(gpus, Demand(0, None, gpu_count=1), Demand(0, None, gpu_count=1))
    assert isinstance(decided[1], Start) and decided[1].placement[0] == ("a", ("a-1",))
    assert isinstance(decided[2], Waiting)


def test_a_named_failed_gpu_waits_and_says_why() -> None:
    gpus = [Gpu("a-0", "a", 0, False, failed="not answering: GPU is lost")]
    decided = queue_pass(gpus, Demand(0, None, gpus=("a-0",)))
    waiting = decided[1]
    assert isinstance(waiting, Waiting)
    assert "GPU a:0 has failed (not answering: GPU is lost)" in waiting.reason


def test_a_healthy_gpu_is_placed_as_before() -> None:
    decided = queue_pass([Gpu("a-0", "a", 0, False)], Demand(0, None, gpu_count=1))
    assert isinstance(decided[1], Start)


def test_booking_a_failed_gpu_is_a_422_with_its_reason() -> None:
    failed = BookableGpu("g1", "dgx", 3, health="failed", health_reason="row remapping pending")
    ok = BookableGpu("g2", "dgx", 4, health="degraded", health_reason="PCIe link x8 of x16")
    refusals = failed_gpu_refusals([ok, failed])
    assert [(r.code, r.details["gpu"]) for r in refusals] == [("gpu_failed", "g1")]
    assert "row remapping pending" in refusals[0].message
    error = refusal_error(refusals + removed_host_refusals([ok], lambda _h: True))
    assert isinstance(error, ValidationFailed) and STATUS_BY_CODE[error.code] == 422
    assert error.details["reasons"][0]["code"] == "gpu_failed"


def test_the_owners_note_names_the_gpu_and_the_alternative() -> None:
    gpu = {
        "uuid": "g1",
        "host": "dgx",
        "index": 3,
        "since": NOW.isoformat(),
        "reason": "2 uncorrectable ECC error(s)",
    }
    slot = {"start": "s", "end": "e", "gpus": [{"host": "dgx", "index": 5}]}
    note = failed_gpu_note(
        owner="ann",
        reservation_id=7,
        title="train",
        start=NOW - timedelta(hours=1),
        end=NOW + timedelta(hours=1),
        gpu=gpu,
        slot=slot,
        now=NOW,
    )
    assert note["user"] == "ann" and note["kind"] == "gpu_health"
    assert "dgx:5 from s to e" in note["text"] and "not cancelled" in note["text"]
    assert "2 uncorrectable ECC" in note["text"]
    none = failed_gpu_note(
        owner="ann",
        reservation_id=7,
        title="train",
        start=NOW,
        end=NOW,
        gpu=gpu,
        slot=None,
        now=NOW,
    )
    assert "no other GPUs" in none["text"]


def test_admins_are_told_when_a_gpu_fails_only() -> None:
    data = {"host": "dgx", "uuid": "g1", "index": 3, "since": NOW.isoformat(), "reason": "lost"}
    note = gpu_failed_note("root", {**data, "state": "failed", "previous": "ok"})
    assert note is not None and note["user"] == "root" and note["kind"] == "gpu_health"
    assert gpu_failed_note("root", {**data, "state": "ok", "previous": "failed"}) is None
    assert gpu_failed_note("root", {**data, "state": "degraded", "previous": "ok"}) is None


def test_hosts_board_shows_each_gpus_health_and_a_lost_gpu() -> None:
    failed = {"index": 2, "state": "failed", "reason": "not answering", "since": NOW.isoformat()}
    raw = {
        "name": "h1",
        "reachable": True,
        "sample": {"gpus": [{"uuid": "GPU-0", "index": 0}, {"uuid": "GPU-1", "index": 1}]},
        "processes": [],
        "gpu_health": {
            "GPU-1": {"index": 1, "state": "degraded", "reason": "hot", "since": NOW.isoformat()},
            "GPU-2": failed,
        },
    }
    (host,) = compose_hosts({"hosts": [raw]}, lambda _uuid: (None, None))
    shown = {gpu["uuid"]: (gpu["index"], gpu["health"]) for gpu in host["gpus"]}
    assert shown == {
        "GPU-0": (0, {"state": "ok", "reason": None, "since": None}),
        "GPU-1": (1, {"state": "degraded", "reason": "hot", "since": NOW.isoformat()}),
        "GPU-2": (2, {"state": "failed", "reason": "not answering", "since": NOW.isoformat()}),
    }
    assert next(g for g in host["gpus"] if g["uuid"] == "GPU-2")["utilization_gpu_percent"] is None


def test_warden_status_says_a_gpu_failed_or_is_degraded_and_why() -> None:
    def gpu(index: int, health: dict[str, Any] | None) -> dict[str, Any]:
        return {
            "host": "dgx",
            "index": index,
            "uuid": f"GPU-{index}",
            "processes": [],
            "health": health,
        }

    rows = status_rows(
        {
            "gpus": [
                gpu(0, {"state": "failed", "reason": "row remapping pending", "since": "x"}),
                gpu(1, {"state": "degraded", "reason": "PCIe link x8 of x16", "since": "x"}),
                gpu(2, {"state": "ok", "reason": None, "since": None}),
            ]
        },
        NOW,
    )
    assert [row[4] for row in rows] == [
        "FAILED (row remapping pending)",
        "degraded (PCIe link x8 of x16)",
        NONE,
    ]
