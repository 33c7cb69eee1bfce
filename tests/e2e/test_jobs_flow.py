"""Jobs from definition to end, on the simulated fleet served over real SSH.

monitor, reservations and jobs run together (`run_services`, as `warden run all` does) on the
in-process bus and, in the second variant, on RabbitMQ. The jobs service logs in to the sim
hosts as the job's owner with Warden's key and starts tasks in (simulated) screen sessions;
the sim shows their GPU processes to the monitor like any other. Deadlines are generous and
nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.shared.bus import Bus
from services.shared.config import Settings
from services.shared.contracts import Envelope
from services.shared.errors import (
    Forbidden,
    ReservationConflict,
    ServiceUnavailable,
    StateConflict,
)
from services.shared.runtime import make_bus
from services.sim.model import SimFleet
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

DEADLINE_S = 30.0


@dataclass
class System:
    fleet: SimFleet
    bus: Bus
    settings: Settings
    events: list[Envelope] = field(default_factory=list)
    # Stops every service and starts them again (RabbitMQ only: the in-process bus is the
    # services' own and ends with them).
    restart: Callable[[], Awaitable[None]] | None = None

    def of(self, event_type: str, job_id: int | None = None) -> list[dict[str, Any]]:
        return [
            e.data
            for e in self.events
            if e.type == event_type
            and (job_id is None or e.data.get("id", e.data.get("job_id")) == job_id)
        ]

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        return await until(condition, what, DEADLINE_S, report=lambda: f"events {self.event_log()}")

    def event_log(self) -> list[str]:
        return [f"{e.type}:{e.data.get('status', '')}" for e in self.events]

    async def call(self, method: str, **args: Any) -> Any:
        return await self.bus.call("jobs", method, args, timeout=20)

    async def job_status(self, job_id: int, *statuses: str) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job: dict[str, Any] = await self.call("get_job", id=job_id, actor="admin", admin=True)
            return job if job["status"] in statuses else None

        what = f"job {job_id} {' or '.join(statuses)}"
        return await until(
            reached, what, DEADLINE_S, interval=0.1, report=lambda: f"events {self.event_log()}"
        )


@pytest.fixture(params=BUS_KINDS)
async def system(
    request: pytest.FixtureRequest, tmp_path: Path, cheap_passwords: None
) -> AsyncIterator[System]:
    kind = request.param
    async with served_fleet(SimFleet(2, 4, seed=3, churn=False), tmp_path) as served:
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
                "preempt_lead_s": 300,
            },
        )
        async with (
            buses(settings, kind) as (bus, client),
            running_services(["monitor", "reservations", "jobs"], settings, kind, bus) as services,
        ):
            system = System(served.fleet, client, settings)

            async def restart() -> None:
                await services.stop()
                services.start(make_bus(settings, "amqp", name="t2"))
                await _wait_for(client, "jobs")

            if kind == "amqp":
                system.restart = restart
            await record(client, system.events, "jobs")
            await record(client, system.events, "monitor", "processes.observed")
            await _wait_for(client, "jobs")
            yield system


async def _wait_for(bus: Bus, service: str) -> None:
    """Until the service answers (on RabbitMQ the services start after the fixture)."""

    async def answers() -> bool:
        try:
            await bus.call(service, "health", {}, timeout=1)
        except ServiceUnavailable:
            return False
        return True

    await until(answers, f"{service} answering", DEADLINE_S, interval=0.2)


async def _gpu(system: System, host: str, index: int) -> str:
    return str((await discovered_gpu(system.bus, host, index))["uuid"])


def _sim_users(fleet: SimFleet, host: str, gpu: str) -> set[str]:
    return {
        p["user"]
        for p in fleet.snapshot(host)["hosts"][0]["processes"]
        if p.get("gpu_uuid") == gpu or gpu in p.get("gpu_uuids", ())
    }


async def test_a_job_of_two_tasks_runs_and_ends_with_their_exit_codes(system: System) -> None:
    host = system.fleet.hosts[0]
    first, second = await _gpu(system, host, 0), await _gpu(system, host, 1)
    created = await system.call(
        "create_job",
        actor="alice",
        name="two tasks",
        env={"SEED": "42"},
        tasks=[
            {"host": host, "command": "sleep 2", "gpus": [0]},
            {"host": host, "command": "exit 3", "gpus": [1]},
        ],
    )
    job_id = created["id"]
    assert created["status"] == "pending"
    assert [t["gpus"] for t in created["tasks"]] == [[first], [second]]

    # bob may read it, not start it
    with pytest.raises(Forbidden):
        await system.call("start_job", id=job_id, actor="bob")
    public = await system.call("get_job", id=job_id, actor="bob")
    assert "env" not in public and "command" not in public["tasks"][0]

    await system.call("start_job", id=job_id, actor="alice")
    done = await system.job_status(job_id, "failed")
    assert [t["status"] for t in done["tasks"]] == ["succeeded", "failed"]
    assert [t["exit_code"] for t in done["tasks"]] == [0, 3]
    assert done["tasks"][1]["reason"] == "exit code 3"

    def task_statuses() -> set[tuple[int, str]]:
        changes = system.of("task.status_changed", job_id)
        return {(c["task"]["index"], c["task"]["status"]) for c in changes}

    expected = {(0, "running"), (0, "succeeded"), (1, "failed")}
    await system.until(lambda: task_statuses() >= expected, "every task event")
    statuses = await system.until(
        lambda: (
            [e["status"] for e in system.of("job.status_changed", job_id)][-1:] == ["failed"]
            and [e["status"] for e in system.of("job.status_changed", job_id)]
        ),
        "the job's last status event",
    )
    assert statuses[0] == "starting"

    # the same tasks under the torchrun template, previewed: ranks, the master and its port
    preview = await system.call(
        "preview_job",
        actor="alice",
        name="ddp",
        template={"kind": "torchrun", "options": {"style": "env"}},
        tasks=[
            {"host": host, "command": "python train.py", "gpus": [0]},
            {"host": host, "command": "python train.py", "gpus": [1]},
        ],
    )
    assert [p["env"]["RANK"] for p in preview] == ["0", "1"]
    assert {p["env"]["MASTER_PORT"] for p in preview} == {str(preview[0]["port"])}
    assert preview[1]["env"]["CUDA_VISIBLE_DEVICES"] == second

    log = await system.call("task_logs", id=job_id, task=0, actor="alice")
    assert log["session"] == f"warden-{job_id}-0" and log["log"]
    history = await system.call("job_history", id=job_id, actor="alice")
    assert {(h["task"], h["status"], h["exit_code"]) for h in history} == {
        (0, "succeeded", 0),
        (1, "failed", 3),
    }
    # an ended job may run again, and be deleted; a running one may not be edited
    again = await system.call("start_job", id=job_id, actor="alice")
    assert again["tasks"][0]["status"] in ("starting", "running"), again["tasks"]
    with pytest.raises(StateConflict):
        await system.call(
            "update_job", id=job_id, actor="alice", name="x", tasks=[{"host": host, "command": "y"}]
        )
    await system.job_status(job_id, "failed")
    assert (await system.call("delete_job", id=job_id, actor="alice")) == {"deleted": job_id}


async def test_a_long_job_is_stopped_gracefully(system: System) -> None:
    host = system.fleet.hosts[1]
    gpu = await _gpu(system, host, 2)
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="long",
            tasks=[{"host": host, "command": "python train.py", "gpus": [2]}],
        )
    )["id"]
    await system.call("start_job", id=job_id, actor="alice")
    await system.job_status(job_id, "running")
    await system.until(lambda: "alice" in _sim_users(system.fleet, host, gpu), "its GPU process")
    stopping = await system.call("stop_job", id=job_id, actor="alice")
    assert stopping["status"] == "stopping"
    stopped = await system.job_status(job_id, "stopped")
    assert stopped["tasks"][0]["exit_code"] == 130  # SIGINT reached it
    assert stopped["stop_reason"] == "stopped by alice"


async def test_a_job_may_not_start_on_a_gpu_someone_else_reserved(system: System) -> None:
    host = system.fleet.hosts[0]
    gpu = await _gpu(system, host, 3)
    now = datetime.now(UTC)
    await system.bus.call(
        "reservations",
        "create_reservation",
        {
            "actor": "bob",
            "gpus": [gpu],
            "start": now.isoformat(),
            "end": (now + timedelta(hours=1)).isoformat(),
            "title": "bob's",
        },
    )
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="intruder",
            tasks=[{"host": host, "command": "python x.py", "gpus": [3]}],
        )
    )["id"]
    with pytest.raises(ReservationConflict) as refused:
        await system.call("start_job", id=job_id, actor="alice")
    assert "reserved by bob" in refused.value.message
    assert (await system.call("get_job", id=job_id, actor="alice"))["status"] == "pending"


async def test_a_queued_job_waits_for_free_gpus_and_yields_to_a_reservation(
    system: System,
) -> None:
    fleet, host = system.fleet, system.fleet.hosts[1]
    gpu = await _gpu(system, host, 0)
    squatter = fleet.start_process(host, 0, "bob", "python other.py")
    await system.until(
        lambda: any(
            p["pid"] == squatter
            for seen in system.of("processes.observed")
            for p in seen["processes"]
        ),
        "the monitor seeing bob's process",
    )
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="backfill",
            queued=True,
            max_runtime_s=600,
            tasks=[{"host": host, "command": "python train.py", "gpus": [0]}],
        )
    )["id"]
    waiting = await system.job_status(job_id, "queued")
    await asyncio.sleep(1.0)  # a few scheduling passes: GPU 0 is busy
    waiting = await system.call("get_job", id=job_id, actor="alice")
    assert waiting["status"] == "queued"
    assert waiting["waiting_reason"] and "busy" in waiting["waiting_reason"]

    fleet.stop_process(host, squatter)
    await system.job_status(job_id, "running")

    # bob reserves the GPU from a minute from now: alice's job gets SIGTERM, its default
    # hand-back signal (the lead is 5 min)
    # and goes back to the queue
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
    await system.until(
        lambda: any(
            c["task"]["status"] == "stopped" for c in system.of("task.status_changed", job_id)
        ),
        "the job yielding",
    )
    requeued = await system.job_status(job_id, "queued")
    assert requeued["queued"] is True
    updates = [u["changed"] for u in system.of("job.updated", job_id)]
    assert ["queued"] in updates
    stopped = [
        c["task"]
        for c in system.of("task.status_changed", job_id)
        if c["task"]["status"] == "stopped"
    ]
    assert stopped[0]["exit_code"] == 143
    assert str(reservation["id"]) in (stopped[0]["reason"] or "")
    # it does not start again while bob's reservation is coming within its window
    await asyncio.sleep(1.0)
    again = await system.call("get_job", id=job_id, actor="alice")
    assert again["status"] == "queued"
    assert "reserved by bob" in (again["waiting_reason"] or "")


async def test_running_jobs_are_still_followed_after_a_restart(system: System) -> None:
    if system.restart is None:
        pytest.skip("restarting the services needs RabbitMQ (the in-process bus ends with them)")
    host = system.fleet.hosts[0]
    await _gpu(system, host, 1)
    job_id = (
        await system.call(
            "create_job",
            actor="alice",
            name="survivor",
            tasks=[{"host": host, "command": "python train.py", "gpus": [1]}],
        )
    )["id"]
    await system.call("start_job", id=job_id, actor="alice")
    before = await system.job_status(job_id, "running")
    await system.restart()
    after = await system.call("get_job", id=job_id, actor="alice")
    assert after["status"] == "running"
    assert after["tasks"][0]["pid"] == before["tasks"][0]["pid"]
    await system.call("stop_job", id=job_id, actor="alice")
    stopped = await system.job_status(job_id, "stopped")
    assert stopped["tasks"][0]["exit_code"] == 130
