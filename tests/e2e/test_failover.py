"""Two replicas of a single-writer service as separate OS processes over the real RabbitMQ
(the test's own vhost) and PostgreSQL (its own database), the leader killed with SIGKILL:

- violations, in the middle of escalations: the standby takes over, and a real webhook
  receiver gets every escalation step of every squat exactly once (a step the dead leader
  had claimed but not sent may be missing: at most once, never twice), no incident lost;
- jobs: calls reach either replica (the standby forwards them to the leader); a task runs on
  a simulated host over SSH when the leader is killed; the standby leads with every job
  reloaded, follows that task to its end without starting it again, and takes new jobs.

Deadlines are generous; the failover time is printed, never asserted (bench/ measures it).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from services.shared.errors import ServiceUnavailable
from services.shared.storage.db import create_engine
from services.sim.model import SimFleet
from services.violations.tables import actions, step_claims
from tests.support.fleet import served_fleet
from tests.support.monitor_double import host_record
from tests.support.polling import until
from tests.support.replica_set import ReplicaSet

pytestmark = [pytest.mark.amqp, pytest.mark.postgres, pytest.mark.faults, pytest.mark.timeout(300)]

STEPS = ("0s webhook admins", "6s webhook admins", "12s webhook admins")
DEADLINE_S = 90.0


async def orphan_claims(pg_url: str, holder_pid: int) -> set[tuple[str, int]]:
    """(incident, step) the killed replica claimed and never reported: allowed to be missing."""
    engine = create_engine(pg_url)
    try:
        async with engine.connect() as conn:
            claimed = (
                await conn.execute(
                    sa.select(step_claims.c.incident_id, step_claims.c.step_index).where(
                        step_claims.c.holder.like(f"%:{holder_pid}-%")
                    )
                )
            ).all()
            reported = (
                await conn.execute(
                    sa.select(actions.c.incident_id, actions.c.step_index).where(
                        actions.c.kind == "action"
                    )
                )
            ).all()
    finally:
        await engine.dispose()
    return {(r[0], r[1]) for r in claimed} - {(r[0], r[1]) for r in reported}


async def test_the_standby_takes_over_and_no_step_goes_out_twice(
    tmp_path: Path, amqp_url: str, pg_url: str
) -> None:
    async with ReplicaSet(tmp_path, amqp_url, pg_url, steps=STEPS) as system:
        system.start("a")
        await until(lambda: system.leader() == "a", "a leads", DEADLINE_S, report=system.logs)
        system.start("b")
        await until(
            lambda: system.role_of("b") == "standby", "b stands by", DEADLINE_S, report=system.logs
        )
        await system.reserve_and_squat(6)
        observing = asyncio.create_task(system.keep_observing(1.0))
        try:
            await until(
                lambda: all(system.incidents_of(s) for s in system.squats),
                "every squat's first step",
                DEADLINE_S,
                report=system.logs,
            )
            killed_pid = system.processes["a"].pid
            killed_at = system.kill("a")
            # Squats that start while nobody leads: their events wait in the durable queues.
            await system.reserve_and_squat(4)
            await until(lambda: system.leader() == "b", "b leads", DEADLINE_S, report=system.logs)
            took_over_s = time.time() - killed_at
            allowed = await orphan_claims(pg_url, killed_pid)

            def all_steps() -> bool:
                got = set(system.counts())
                return all(len(system.incidents_of(s)) >= 1 for s in system.squats) and all(
                    (i, step) in got or (i, step) in allowed
                    for s in system.squats
                    for i in system.incidents_of(s)
                    for step in range(len(STEPS))
                )

            await until(all_steps, "every step of every squat", DEADLINE_S, report=system.logs)
            await asyncio.sleep(3)  # room for a duplicate to show up
        finally:
            observing.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await observing
        print(f"standby b leads {took_over_s:.1f}s after a was killed; orphan claims: {allowed}")
        counts = system.counts()
        assert system.duplicates() == 0, counts
        assert all(n == 1 for n in counts.values()), counts
        # One incident per squatted GPU, none lost, and b alone took the later steps.
        assert all(len(system.incidents_of(s)) == 1 for s in system.squats), system.deliveries
        assert system.lost() == 0
        assert system.processes["b"].poll() is None, system.logs()
        log_b = system.log_path("b").read_text()
        assert "this replica leads" in log_b
        assert "Traceback" not in log_b, system.logs()


JOB_CALL_S = 30.0


async def test_jobs_standby_forwards_calls_and_takes_over_with_every_job(
    tmp_path: Path, amqp_url: str, pg_url: str
) -> None:
    fleet = SimFleet(1, 2, seed=3, churn=False)
    async with served_fleet(fleet, tmp_path) as served:
        extra = {"ssh": served.config()["ssh"], "jobs": {"poll_interval_s": 0.3}}
        async with ReplicaSet(
            tmp_path / "set", amqp_url, pg_url, service="jobs", extra=extra
        ) as system:
            for entry in served.hosts():
                await system.monitor.add(host_record(**entry))
            await _jobs_failover(system, fleet.hosts[0])


async def _jobs_failover(system: ReplicaSet, sim_host: str) -> None:
    assert system.bus is not None
    bus = system.bus
    await system.monitor.add(host_record("jh1"))
    system.start("a")
    await until(lambda: system.leader() == "a", "a leads", DEADLINE_S, report=system.logs)
    system.start("b")
    await until(
        lambda: system.role_of("b") == "standby", "b stands by", DEADLINE_S, report=system.logs
    )

    async def create(name: str) -> int:
        task = {"host": "jh1", "command": "sleep 1"}
        made = await bus.call(
            "jobs",
            "create_job",
            {"actor": "alice", "name": name, "tasks": [task]},
            timeout=JOB_CALL_S,
        )
        return int(made["id"])

    async def listed() -> set[int]:
        found = await bus.call("jobs", "list_jobs", {"limit": 100, "offset": 0}, timeout=JOB_CALL_S)
        return {int(job["id"]) for job in found["jobs"]}

    # Eight calls compete on the service's queue: both replicas answer some, the
    # standby by forwarding to the leader; every job is there whoever took the call.
    made = {await create(f"before {n}") for n in range(8)}
    for _ in range(6):
        assert await listed() == made

    # A task running on a (simulated) host over SSH while its leader dies.
    task = {"host": sim_host, "command": "sleep 6"}
    started = await bus.call(
        "jobs",
        "create_job",
        {"actor": "alice", "name": "across the failover", "tasks": [task]},
        timeout=JOB_CALL_S,
    )
    running = int(started["id"])
    made.add(running)
    await bus.call(
        "jobs",
        "start_job",
        {"id": running, "actor": "alice", "admin": False},
        timeout=JOB_CALL_S,
    )

    async def job(job_id: int) -> dict[str, Any]:
        found: dict[str, Any] = await bus.call(
            "jobs",
            "get_job",
            {"id": job_id, "actor": "alice", "admin": False},
            timeout=JOB_CALL_S,
        )
        return found

    async def status_is(*wanted: str) -> bool:
        with contextlib.suppress(ServiceUnavailable):  # no leader during the takeover
            return (await job(running))["status"] in wanted
        return False

    await until(lambda: status_is("running"), "the task running", DEADLINE_S)

    system.kill("a")
    await until(lambda: system.leader() == "b", "b leads", DEADLINE_S, report=system.logs)
    assert await listed() == made  # reloaded from the database
    # b follows the task it did not start to its end, and starts nothing again.
    await until(
        lambda: status_is("succeeded"),
        "the task followed to its end",
        DEADLINE_S,
        report=system.logs,
    )
    [only] = (await job(running))["tasks"]
    assert only["run"] == 1 and only["exit_code"] == 0, only
    made.add(await create("after"))
    assert await listed() == made
    log_b = system.log_path("b").read_text()
    assert "this replica leads" in log_b
    assert "Traceback" not in log_b, system.logs()
