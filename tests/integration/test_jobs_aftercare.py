"""What the jobs service does about a run besides starting and stopping it
(`services.jobs.aftercare`), on a real SQLite database: a GPU that failed under a queued job and
a host that was lost send it back to the queue when it ends; a run past its time limit is told
once, and stopped only when the job says so. The runner is a fake that answers polls and
records signals (the SSH side is tested in test_jobs_sshd.py and the end-to-end tests)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.jobs import repository
from services.jobs.aftercare import Aftercare
from services.jobs.domain import Handback, Job, Task
from services.jobs.scripts import Probe
from services.jobs.state import JobState, TaskRun
from services.jobs.supervisor import TaskSupervisor
from services.jobs.working_state import WorkingState
from services.shared.config import HostConfig, load_settings
from services.shared.storage import db
from services.shared.storage.store import Store
from tests.support.config import write_config

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
GPU = "GPU-aaaa"


class Runner:
    """The task runner's `poll` (answers what `probe` says) and `signal` (recorded)."""

    def __init__(self) -> None:
        self.probe = Probe("running", pid=42, started_at=NOW)
        self.sent: list[str] = []

    async def poll(
        self, _host: HostConfig, _login: str, sessions: Sequence[str]
    ) -> dict[str, Probe]:
        return {session: self.probe for session in sessions}

    async def signal(self, _host: HostConfig, _login: str, _session: str, signal: str) -> str:
        self.sent.append(signal)
        return "signalled"


class World:
    def __init__(self, working: WorkingState, runner: Runner) -> None:
        self.working, self.runner = working, runner
        self.supervisor = TaskSupervisor(working, runner)  # type: ignore[arg-type]
        self.aftercare = Aftercare(working, self.supervisor, bus=None)
        self.now = NOW

    async def job(
        self,
        handback: Handback | None = None,
        max_runtime_s: float | None = None,
        status: str = "running",
    ) -> JobState:
        job = Job(0, "alice", "train", (Task(0, "h1", "python train.py", gpus=(GPU,)),))
        job = replace(job, handback=handback or Handback())
        run = TaskRun(status=status, run=1, host="h1", gpus=(GPU,), pid=42, started_at=NOW)
        state = JobState(
            job,
            NOW,
            NOW,
            [run],
            queued=False,
            from_queue=True,
            enqueued_at=NOW - timedelta(hours=1),
            max_runtime_s=max_runtime_s,
        )
        async with self.working.store.write() as conn:
            job_id = await repository.insert_job(conn, state)
        state.job = replace(job, id=job_id)
        self.working.jobs[job_id] = state
        return state

    async def poll(self) -> None:
        self.supervisor.poll_tasks()
        await self.supervisor.settle()


@pytest.fixture
async def world(tmp_path: Path) -> AsyncIterator[World]:
    config = load_settings(
        write_config(
            tmp_path / "warden.toml",
            hosts=[{"name": "h1", "address": "127.0.0.1", "user": "warden"}],
            jobs={"early_failure_s": 300},
        ),
        environ={"HOME": str(tmp_path)},
    )
    engine = db.create_engine(f"sqlite+aiosqlite:///{tmp_path}/jobs.db")
    await db.upgrade(engine, "jobs")
    runner = Runner()
    holder: list[World] = []
    working = WorkingState(Store(engine), config, clock=lambda: holder[0].now)
    holder.append(World(working, runner))
    try:
        yield holder[0]
    finally:
        await engine.dispose()


async def reloaded(world: World, job_id: int) -> JobState:
    async with world.working.store.read() as conn:
        [state] = [s for s in await repository.load_jobs(conn) if s.id == job_id]
    return state


async def test_a_failed_gpu_sends_the_job_back_to_the_queue_when_it_ends(world: World) -> None:
    state = await world.job()
    other = await world.job()
    other.tasks[0].gpus = ("GPU-bbbb",)
    await world.aftercare.on_gpu_health({"host": "h1", "uuid": GPU, "index": 0, "state": "ok"})
    assert state.failure is None  # only "failed" counts
    await world.aftercare.on_gpu_health(
        {
            "host": "h1",
            "uuid": GPU,
            "index": 0,
            "state": "failed",
            "reason": "Xid 79",
            "since": NOW.isoformat(),
        }
    )
    assert (state.failure, state.failure_reason) == ("infrastructure", "h1 GPU 0 failed: Xid 79")
    assert other.failure is None and world.runner.sent == []  # nothing is stopped for it
    assert state.status == "running"

    world.now = NOW + timedelta(seconds=20)  # it crashes on the broken GPU, early
    world.runner.probe = Probe("exited", exit_code=1)
    await world.poll()
    assert state.status == "queued" and state.queued
    assert state.tasks[0].status == "pending" and state.tasks[0].run == 1
    assert state.enqueued_at == NOW - timedelta(hours=1)  # its place in the queue
    saved = await reloaded(world, state.id)
    assert (saved.status, saved.failure) == ("queued", "infrastructure")


async def test_a_lost_host_that_restarted_sends_the_job_back_to_the_queue(world: World) -> None:
    state = await world.job(status="lost")
    world.runner.probe = Probe("gone")
    await world.poll()
    assert state.status == "queued" and state.failure == "infrastructure"
    assert "h1 was lost" in (state.failure_reason or "")


async def test_an_early_failure_of_its_own_is_failed_not_requeued(world: World) -> None:
    state = await world.job()
    world.now = NOW + timedelta(seconds=12)
    world.runner.probe = Probe("exited", exit_code=2)
    await world.poll()
    await world.aftercare.settle()
    assert (state.status, state.failure) == ("failed", "early")
    assert state.failure_reason == "task 0 exited with status 2 on its own"
    assert (await reloaded(world, state.id)).failure == "early"


async def test_a_late_failure_is_neither(world: World) -> None:
    state = await world.job(Handback(requeue=True))
    world.now = NOW + timedelta(hours=2)
    world.runner.probe = Probe("exited", exit_code=2)
    await world.poll()
    assert (state.status, state.failure) == ("failed", None)


async def test_the_time_limit_is_told_once_and_the_job_goes_on(world: World) -> None:
    state = await world.job(max_runtime_s=3600)
    async with world.working.lock:
        await world.aftercare.time_limits(NOW + timedelta(minutes=59))
    assert not state.time_limit_told
    async with world.working.lock:
        await world.aftercare.time_limits(NOW + timedelta(minutes=61))
        await world.aftercare.time_limits(NOW + timedelta(minutes=62))
    await world.supervisor.settle()
    assert state.time_limit_told and state.stop_reason is None and world.runner.sent == []
    assert (await reloaded(world, state.id)).time_limit_told


async def test_the_time_limit_stops_a_job_that_says_so_with_its_signal(world: World) -> None:
    state = await world.job(Handback(signal="USR1", on_time_limit="stop"), max_runtime_s=3600)
    world.now = past = NOW + timedelta(minutes=61)
    async with world.working.lock:
        await world.aftercare.time_limits(past)
    await world.supervisor.settle()
    assert world.runner.sent == ["USR1"]
    assert state.stop_reason == "it ran past its time limit of 3600 s"
    for after_s in (11, 21):  # then the usual escalation: TERM, then KILL (10 s graces)
        async with world.working.lock:
            await world.supervisor.escalate_stops(past + timedelta(seconds=after_s))
    await world.supervisor.settle()
    assert world.runner.sent == ["USR1", "TERM", "KILL"]
    world.runner.probe = Probe("gone")
    await world.poll()
    assert state.status == "stopped" and not state.queued  # stopped, not requeued
