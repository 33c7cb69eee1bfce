"""The jobs' queue never places work on a GPU split by MIG, only on its instances (which the
task then sees as `CUDA_VISIBLE_DEVICES=MIG-<uuid>`)."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

from services.jobs.api import _GpuRef
from services.jobs.domain import Job, Task
from services.jobs.engine import Engine
from services.jobs.render import GPU_ENV, render_task
from services.jobs.working_state import WorkingState
from services.shared.config import load_settings
from tests.support.config import write_config

NOW = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)
PARENT, OTHER = "GPU-p", "GPU-o"
MIG_A, MIG_B = "MIG-a", "MIG-b"


def engine(tmp_path: Path) -> Engine:
    config = write_config(
        tmp_path / "warden.toml", hosts=[{"name": "h1", "address": "127.0.0.1", "user": "w"}]
    )
    settings = load_settings(config, environ={"HOME": str(tmp_path)})
    working = WorkingState(None, settings, clock=lambda: NOW)  # type: ignore[arg-type]
    # The pass reads no supervisor; the engine only hands it its after-care hook.
    return Engine(working, SimpleNamespace(), None)  # type: ignore[arg-type]


def found(uuid: str, index: int, parent: str | None = None) -> dict[str, object]:
    data: dict[str, object] = {"host": "h1", "uuid": uuid, "index": index, "name": "A100"}
    if parent is not None:
        data["mig_parent_uuid"] = parent
    return data


def test_a_split_gpu_is_never_free_its_instances_are(tmp_path: Path) -> None:
    jobs = engine(tmp_path)
    for data in (found(PARENT, 0), found(OTHER, 1), found(MIG_A, 1000, PARENT)):
        jobs.on_gpu_discovered(data)
    jobs.working.add_gpus([{**found(MIG_B, 1001, PARENT), "present": True}])
    busy = {uuid: gpu.busy for uuid, gpu in jobs.queue_state(NOW).gpus.items()}
    assert busy == {PARENT: True, OTHER: False, MIG_A: False, MIG_B: False}


def test_a_task_placed_on_an_instance_sees_it_by_its_uuid() -> None:
    job = Job(1, "alice", "train", (Task(0, "h1", "python train.py"),))
    task = render_task(job, job.tasks[0], host="h1", gpus=[MIG_A])
    assert task.env[GPU_ENV] == MIG_A


def test_a_task_names_an_instance_by_its_place() -> None:
    ref = _GpuRef()
    assert ref.deserialize("0/mig1") == 1001
    assert ref.deserialize(1001) == 1001
    assert ref.deserialize("3") == 3
    assert ref.deserialize("MIG-a") == "MIG-a"
