"""GPUs the jobs service missed (their gpu.discovered went out before it listened, and the
reservations' list at its start came before them) are asked for again while a queued job waits
or a host has none known, at most every GPU_RELIST."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from services.jobs import engine as engine_module
from services.jobs.domain import Job, Task
from services.jobs.engine import GPU_RELIST, Engine
from services.jobs.state import JobState, TaskRun
from services.jobs.working_state import WorkingState
from services.shared.config import load_settings
from tests.support.config import write_config

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
LISTED = [
    {"uuid": f"GPU-{i}", "host": "h1", "index": i, "name": "A100", "present": True}
    for i in range(4)
]


class Lister:
    def __init__(self) -> None:
        self.calls = 0

    async def call(self, bus: Any, args: Any = None) -> list[dict[str, Any]]:
        self.calls += 1
        return LISTED


@pytest.fixture
def lister(monkeypatch: pytest.MonkeyPatch) -> Lister:
    fake = Lister()
    monkeypatch.setattr(engine_module.reservations_api, "LIST_GPUS", fake)
    return fake


def engine(tmp_path: Path) -> Engine:
    config = write_config(
        tmp_path / "warden.toml", hosts=[{"name": "h1", "address": "127.0.0.1", "user": "w"}]
    )
    settings = load_settings(config, environ={"HOME": str(tmp_path)})
    working = WorkingState(None, settings, clock=lambda: NOW)  # type: ignore[arg-type]
    return Engine(working, SimpleNamespace(), None)  # type: ignore[arg-type]


def waiting_job(job_id: int) -> JobState:
    job = Job(job_id, "alice", "train", (Task(0, None, "python x.py", gpu_count=4),))
    state = JobState(job, NOW, NOW, [TaskRun()])
    state.queued, state.status, state.waiting_reason = True, "queued", "no host has 4 free GPUs"
    return state


async def test_a_waiting_job_has_the_gpus_listed_again_at_most_every_relist(
    tmp_path: Path, lister: Lister
) -> None:
    jobs = engine(tmp_path)
    jobs.on_gpu_discovered(LISTED[0])  # the one event it heard: h1 has a GPU known
    await jobs._learn_unknown_gpus(NOW)
    assert lister.calls == 0  # nothing waits, every host has GPUs known

    jobs.working.jobs[1] = waiting_job(1)
    await jobs._learn_unknown_gpus(NOW)
    assert lister.calls == 1
    assert sorted(jobs.working.gpus) == [g["uuid"] for g in LISTED]
    await jobs._learn_unknown_gpus(NOW + GPU_RELIST / 2)
    assert lister.calls == 1
    await jobs._learn_unknown_gpus(NOW + GPU_RELIST)
    assert lister.calls == 2


async def test_a_host_with_no_gpu_known_has_them_listed(tmp_path: Path, lister: Lister) -> None:
    jobs = engine(tmp_path)
    await jobs._learn_unknown_gpus(NOW)
    assert lister.calls == 1
    assert len(jobs.working.gpus) == 4
