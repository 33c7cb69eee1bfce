"""A job's stop signals are recorded before they go out, so a new leader (or a restart) that
reloads the job sends none of them a second time (real SQLite and PostgreSQL; the runner is a
fake that records each signal)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from services.jobs import repository
from services.jobs.domain import Job, Task
from services.jobs.state import JobState, TaskRun
from services.jobs.supervisor import TaskSupervisor
from services.jobs.working_state import WorkingState
from services.shared.config import HostConfig, Settings, load_settings
from services.shared.storage import db
from services.shared.storage.store import Store
from tests.support.config import write_config

NOW = datetime(2026, 11, 24, 12, 0, tzinfo=UTC)


class SignalRecorder:
    """The task runner's `signal`, recorded (nothing else of the runner is used here)."""

    def __init__(self) -> None:
        self.sent: list[str] = []

    async def signal(self, _host: HostConfig, _login: str, _session: str, signal: str) -> str:
        self.sent.append(signal)
        return "signalled"


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path}/jobs.db"
    return str(request.getfixturevalue("pg_url"))


def settings(tmp_path: Path) -> Settings:
    config = write_config(
        tmp_path / "warden.toml",
        hosts=[{"name": "h1", "address": "127.0.0.1", "user": "warden"}],
        jobs={"int_grace_s": 10, "term_grace_s": 10},
    )
    return load_settings(config, environ={"HOME": str(tmp_path)})


def replica(store: Store, config: Settings) -> tuple[WorkingState, TaskSupervisor, SignalRecorder]:
    working = WorkingState(store, config, clock=lambda: NOW)
    runner = SignalRecorder()
    return working, TaskSupervisor(working, runner), runner  # type: ignore[arg-type]


async def test_no_stop_signal_is_sent_twice_across_a_takeover(
    database_url: str, tmp_path: Path
) -> None:
    engine = db.create_engine(database_url)
    await db.upgrade(engine, "jobs")
    store = Store(engine)
    config = settings(tmp_path)
    try:
        working, supervisor, first = replica(store, config)
        job = Job(1, "alice", "train", (Task(0, "h1", "python train.py"),))
        state = JobState(job, NOW, NOW, [TaskRun(status="running", run=1, host="h1")])
        async with store.write() as conn:
            job_id = await repository.insert_job(conn, state)
        state.job = Job(job_id, "alice", "train", job.tasks)
        working.jobs[job_id] = state

        async with working.lock:
            await supervisor.request_stop(state, "stopped by alice")
            await supervisor.escalate_stops(NOW + timedelta(seconds=11))  # past INT's grace
        await supervisor.settle()
        assert first.sent == ["INT", "TERM"]

        # The leader dies; a new one reloads the job and goes on at the same moment.
        working, supervisor, second = replica(store, config)
        await working.load()
        async with working.lock:
            await supervisor.escalate_stops(NOW + timedelta(seconds=12))
        await supervisor.settle()
        assert second.sent == []  # INT and TERM went out already
        async with working.lock:
            await supervisor.escalate_stops(NOW + timedelta(seconds=21))  # past TERM's grace
            await supervisor.escalate_stops(NOW + timedelta(seconds=22))
        await supervisor.settle()
        assert second.sent == ["KILL"]
    finally:
        await engine.dispose()
