"""Hosts managed live, as jobs, violations and reservations follow them, on RabbitMQ and the
simulated fleet served over real SSH.

The config names only sim-001. A test double of the monitor's inventory (`MonitorDouble`: it
serves `list_hosts` and publishes the real host.*, gpu.discovered and processes.observed events)
adds sim-002 at run time with the label "lab-b". Then: a job on sim-002 starts there; a violation
on sim-002 takes the steps of the override for "lab-b" and its terminal notice reaches the
offender there. sim-002 removed: no new job and no new booking there (each refused with the
reason), while the job already running there is still followed and stopped, and the reservation
made before stays. Added again: booked and previewed again. Deadlines are generous; nothing
asserts how long anything took.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.shared.bus import Bus
from services.shared.contracts import Envelope
from services.shared.errors import (
    InvalidRequest,
    NotFound,
    ServiceUnavailable,
    StateConflict,
    ValidationFailed,
)
from services.sim.model import SimFleet
from tests.support.events import record
from tests.support.fleet import ServedFleet, served_fleet
from tests.support.monitor_double import MonitorDouble, host_record
from tests.support.polling import until
from tests.support.system import buses, running_services, system_settings

pytestmark = [pytest.mark.amqp, pytest.mark.timeout(240)]

DEADLINE_S = 30.0
ADDED = "sim-002"


@dataclass
class System:
    fleet: SimFleet
    served: ServedFleet
    bus: Bus
    monitor: MonitorDouble
    events: list[Envelope] = field(default_factory=list)

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        return await until(
            condition, what, DEADLINE_S, report=lambda: f"events {[e.type for e in self.events]}"
        )

    async def call(self, service: str, method: str, **args: Any) -> Any:
        return await self.bus.call(service, method, args, timeout=20)

    def record_of(self, name: str, **fields: Any) -> dict[str, Any]:
        """The inventory's record of a host of the served fleet."""
        host = self.served.host(name)
        keys = ("address", "port", "user", "key_file")
        return host_record(name, **{k: getattr(host, k) for k in keys}, **fields)

    def gpu(self, host: str, index: int) -> str:
        gpus = self.fleet.snapshot(host)["hosts"][0]["gpus"]
        return str(next(g["uuid"] for g in gpus if g["index"] == index))

    async def discover(self, host: str) -> None:
        for gpu in self.fleet.snapshot(host)["hosts"][0]["gpus"]:
            await self.monitor.discovered(host, gpu["index"], gpu["uuid"], gpu["name"])

    async def job_status(self, job_id: int, *statuses: str) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            job: dict[str, Any] = await self.call("jobs", "get_job", id=job_id, actor="alice")
            return job if job["status"] in statuses else None

        return await until(reached, f"job {job_id} {' or '.join(statuses)}", DEADLINE_S)


async def _answering(bus: Bus, service: str) -> bool:
    try:
        await bus.call(service, "health", {}, timeout=1)
    except ServiceUnavailable:
        return False
    return True


@pytest.fixture
async def system(tmp_path: Path, amqp_url: str, cheap_passwords: None) -> AsyncIterator[System]:
    async with served_fleet(SimFleet(2, 2, seed=3, churn=False), tmp_path) as served:
        settings = await system_settings(
            tmp_path,
            served,
            bus={"amqp_url": amqp_url},
            hosts=[h for h in served.hosts() if h["name"] != ADDED],  # sim-001 only
            jobs={"poll_interval_s": 0.3, "int_grace_s": 1.0, "term_grace_s": 1.0},
            violations={
                "handlers": ["terminal"],
                "steps": ["1h email admins"],  # never reached here
                "overrides": [{"labels": ["lab-b"], "steps": ["0s terminal offender"]}],
            },
        )
        names = ["reservations", "violations", "jobs"]
        async with (
            buses(settings, "amqp") as (bus, client),
            running_services(names, settings, "amqp", bus),
        ):
            monitor = MonitorDouble(client)
            system = System(served.fleet, served, client, monitor)
            monitor.hosts["sim-001"] = system.record_of("sim-001")
            await monitor.serve()
            await record(client, system.events, "violations")
            for service in names:
                await until(lambda s=service: _answering(client, s), f"{service}", DEADLINE_S)
            try:
                yield system
            finally:
                await monitor.stop()


async def _refused(call: Callable[[], Any], error: type[Exception]) -> Exception | None:
    try:
        await call()
    except error as err:
        return err
    return None


async def test_a_host_added_then_removed_then_added_again(system: System) -> None:  # noqa: C901 - one scenario, several waits in sequence
    await system.discover("sim-001")
    await system.monitor.add(system.record_of(ADDED, labels=["lab-b"]))
    await system.discover(ADDED)
    gpu0, gpu1 = system.gpu(ADDED, 0), system.gpu(ADDED, 1)
    task = {"host": ADDED, "command": "python train.py", "gpus": [0]}

    # A job on the host added at run time starts there (once jobs heard of it and its GPU).
    async def created() -> dict[str, Any] | None:
        try:
            job: dict[str, Any] = await system.call(
                "jobs", "create_job", actor="alice", name="on the new host", tasks=[task]
            )
        except InvalidRequest:
            return None
        return job

    job = await until(created, f"a job accepted on {ADDED}", DEADLINE_S)
    assert job["tasks"][0]["gpus"] == [gpu0]
    await system.call("jobs", "start_job", id=job["id"], actor="alice")
    running = await system.job_status(job["id"], "running")
    assert running["tasks"][0]["host"] == ADDED

    # A violation there takes the steps of the override for its label: the terminal notice.
    start = datetime.now(UTC)
    reservation = await system.call(
        "reservations",
        "create_reservation",
        actor="alice",
        gpus=[gpu1],
        title="protected",
        start=start.isoformat(),
        end=(start + timedelta(hours=1)).isoformat(),
    )
    tty = system.fleet.login(ADDED, "bob")
    pid = system.fleet.start_process(ADDED, 1, "bob", "python steal_gpu.py")

    async def opened() -> list[dict[str, Any]]:
        if not system.of("violation.opened"):  # until violations has the reservation
            await system.monitor.observed(ADDED, [(pid, "bob", gpu1, "python steal_gpu.py")])
        return system.of("violation.opened")

    (incident,) = await system.until(opened, "violation.opened")
    escalated = await system.until(lambda: system.of("violation.escalated"), "escalated")
    assert (escalated[0]["action"], escalated[0]["recipients"]) == ("terminal", ["offender"])
    assert incident["host"] == ADDED
    notices = await system.until(lambda: system.fleet.tty_messages(ADDED, tty), "the notice")
    assert "alice" in notices[0]

    # Removed: no new job, no new booking; the running job is still followed and stopped.
    await system.monitor.remove(ADDED)

    async def preview_refused() -> Exception | None:
        return await _refused(
            lambda: system.call("jobs", "preview_job", actor="alice", name="again", tasks=[task]),
            InvalidRequest,
        )

    refused = await until(preview_refused, "a job refused on the removed host", DEADLINE_S)
    assert "removed from the inventory" in str(refused)

    async def no_slot() -> Exception | None:
        return await _refused(
            lambda: system.call(
                "reservations",
                "find_slot",
                actor="alice",
                count=1,
                duration_minutes=60,
                host=ADDED,
            ),
            NotFound,
        )

    await until(no_slot, "no slot offered on the removed host", DEADLINE_S)
    later = datetime.now(UTC) + timedelta(days=1)
    booking = {
        "actor": "alice",
        "gpus": [gpu0],
        "title": "later",
        "start": later.isoformat(),
        "end": (later + timedelta(hours=1)).isoformat(),
    }
    with pytest.raises(ValidationFailed, match=f"{ADDED} was removed"):
        await system.call("reservations", "create_reservation", **booking)
    kept = await system.call("reservations", "get_reservation", id=reservation["id"])
    assert kept["status"] == "active"

    await system.call("jobs", "stop_job", id=job["id"], actor="alice")
    stopped = await system.job_status(job["id"], "stopped")
    assert stopped["tasks"][0]["exit_code"] == 130  # SIGINT reached it on the removed host
    with pytest.raises(StateConflict, match="removed"):
        await system.call("jobs", "start_job", id=job["id"], actor="alice")

    # Added again: offered again.
    await system.monitor.add(system.record_of(ADDED, labels=["lab-b"]))

    async def booked() -> dict[str, Any] | None:
        try:
            made: dict[str, Any] = await system.call(
                "reservations", "create_reservation", **booking
            )
        except ValidationFailed:
            return None
        return made

    assert (await until(booked, "a booking on the host added again", DEADLINE_S))["id"]

    async def previewed() -> list[dict[str, Any]] | None:
        try:
            shown: list[dict[str, Any]] = await system.call(
                "jobs", "preview_job", actor="alice", name="again", tasks=[task]
            )
        except InvalidRequest:
            return None
        return shown

    preview = await until(previewed, "a job accepted again on the host", DEADLINE_S)
    assert preview[0]["host"] == ADDED
