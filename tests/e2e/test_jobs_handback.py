"""Queued jobs that hand their GPUs back, and jobs that fail early, on the simulated fleet served
over real SSH (the sim imitates the jobs' remote scripts: a command's `trap '...' USR1` handles
the signal and ends with the handler's exit status).

monitor, reservations, jobs and violations (which carries the notification path) run together
as `warden run all` does, on the in-process bus and on RabbitMQ. Deadlines are generous and
nothing asserts how long anything took.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.shared.bus import Bus
from services.shared.contracts import Envelope
from services.sim.model import SimFleet
from tests.e2e.test_jobs_flow import DEADLINE_S, _wait_for
from tests.support.events import record
from tests.support.fleet import served_fleet
from tests.support.polling import until
from tests.support.system import (
    BUS_KINDS,
    bus_config,
    buses,
    discovered_gpu,
    running_services,
    system_settings,
)

pytestmark = pytest.mark.timeout(240)


@dataclass
class System:
    fleet: SimFleet
    bus: Bus
    events: list[Envelope] = field(default_factory=list)

    def of(self, event_type: str, job_id: int | None = None) -> list[dict[str, Any]]:
        return [
            e.data
            for e in self.events
            if e.type == event_type
            and (job_id is None or e.data.get("id", e.data.get("job_id")) == job_id)
        ]

    async def call(self, method: str, **args: Any) -> Any:
        return await self.bus.call("jobs", method, args, timeout=20)

    async def job(self, job_id: int, **wanted: Any) -> dict[str, Any]:
        """The job once every field in `wanted` has that value."""

        async def reached() -> dict[str, Any] | None:
            job: dict[str, Any] = await self.call("get_job", id=job_id, actor="admin", admin=True)
            return job if all(job[k] == v for k, v in wanted.items()) else None

        def events() -> str:
            return f"events {[(e.type, e.data.get('status')) for e in self.events]}"

        return await until(
            reached, f"job {job_id} {wanted}", DEADLINE_S, interval=0.1, report=events
        )


@pytest.fixture(params=BUS_KINDS)
async def system(
    request: pytest.FixtureRequest, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[System]:
    kind = request.param
    async with served_fleet(SimFleet(1, 2, seed=3, churn=False), tmp_path) as served:
        settings = await system_settings(
            tmp_path,
            served,
            bus=bus_config(request),
            monitor={"interval_s": 0.5},
            jobs={
                "poll_interval_s": 0.3,
                "int_grace_s": 1.0,
                "term_grace_s": 1.0,
                "queue_min_window_s": 600,
                "preempt_lead_s": 5,  # the site's lead: the job's own grace wins
                "early_failure_s": 300,
            },
        )
        async with (
            buses(settings, kind) as (bus, client),
            running_services(
                ["monitor", "reservations", "jobs", "violations"], settings, kind, bus
            ),
        ):
            system = System(served.fleet, client)
            await record(client, system.events, "jobs")
            await record(client, system.events, "violations", "notification.sent")
            await _wait_for(client, "jobs")
            await _wait_for(client, "violations")
            yield system


async def test_a_queued_job_checkpoints_on_its_signal_is_requeued_and_resumes(
    system: System,
) -> None:
    host = system.fleet.hosts[0]
    gpu = str((await discovered_gpu(system.bus, host, 0))["uuid"])
    command = "trap 'python save_checkpoint.py; exit 0' USR1; python train.py --resume"
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="resumable",
            queued=True,
            max_runtime_s=600,
            handback_signal="USR1",
            handback_grace_s=120,
            tasks=[{"host": host, "command": command, "gpus": [0]}],
        )
    )["id"]
    first = await system.job(job_id, status="running")
    assert (first["handback_signal"], first["handback_grace_s"]) == ("USR1", 120.0)
    assert first["interruptions"] == 0

    # bob's reservation starts in a minute, within the job's grace of 2 min: it gets SIGUSR1 now
    start = datetime.now(UTC) + timedelta(minutes=1)
    reservation = await system.bus.call(
        "reservations",
        "create_reservation",
        {
            "actor": "bob",
            "gpus": [gpu],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=1)).isoformat(),
            "title": "bob's run",
        },
    )
    requeued = await system.job(job_id, status="queued")
    assert requeued["queued"] is True and requeued["interruptions"] == 1

    def stopped() -> list[dict[str, Any]]:
        changes = system.of("task.status_changed", job_id)
        return [c["task"] for c in changes if c["task"]["status"] == "stopped"]

    [ended] = await until(stopped, "the task's end event", DEADLINE_S)
    assert ended["exit_code"] == 0  # it saved its checkpoint and ended by itself
    assert str(reservation["id"]) in (ended["reason"] or "")
    [task] = [t for t in system.fleet.tasks(host) if t["session"] == f"warden-{job_id}-0"]
    assert (task["caught"], task["exit_code"]) == ("USR1", 0)  # its handler ran, not a kill
    assert requeued["enqueued_at"] == first["enqueued_at"]  # it kept its place

    # bob gives the GPU back: the job starts again (its second run resumes from the checkpoint)
    await system.bus.call(
        "reservations", "cancel_reservation", {"id": reservation["id"], "actor": "bob"}
    )
    again = await system.job(job_id, status="running")
    assert again["tasks"][0]["run"] == 2 and again["interruptions"] == 1
    await system.call("stop_job", id=job_id, actor="alice")
    await system.job(job_id, status="stopped")


async def test_an_early_failure_of_its_own_is_told_with_its_output_and_not_retried(
    system: System,
) -> None:
    host = system.fleet.hosts[0]
    await discovered_gpu(system.bus, host, 1)
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="typo",
            queued=True,
            tasks=[{"host": host, "command": "python trian.py; exit 2", "gpus": [1]}],
        )
    )["id"]
    failed = await system.job(job_id, status="failed")
    assert failed["failure"] == "early"
    assert "exited with status 2" in (failed["failure_reason"] or "")

    def told() -> list[dict[str, Any]]:
        return [n for n in system.of("notification.sent") if n["kind"] == "job_failed"]

    [note] = await until(told, "alice told", DEADLINE_S)
    assert note["user"] == "alice"
    assert note["title"] == "Job typo failed (exit status 2)"
    assert "not retried" in note["text"]
    assert f"sim: warden-{job_id}-0 exited with status 2" in note["text"]  # the output's tail
    # not retried: still failed after more passes, its task ran once, nobody told twice
    await system.job(job_id, status="failed")
    again = await system.call("get_job", id=job_id, actor="alice")
    assert again["status"] == "failed" and again["queued"] is False
    assert again["tasks"][0]["run"] == 1
    assert len(told()) == 1
