"""A job's status from its tasks', and a definition's trip through the RPC schema and the
`spec` column."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from services.jobs.api import DefinitionSchema
from services.jobs.domain import job_status
from services.jobs.spec import from_spec, spec_json, to_job
from services.shared.errors import InvalidRequest
from services.shared.validation import load_args


@pytest.mark.parametrize(
    ("tasks", "flags", "expected"),
    [
        (["pending", "pending"], {}, "pending"),
        (["pending"], {"queued": True}, "queued"),
        (["pending"], {"scheduled": True}, "scheduled"),
        (["starting", "running"], {}, "starting"),
        (["running", "running"], {}, "running"),
        (["running", "lost"], {}, "lost"),
        (["running", "succeeded"], {}, "running"),
        (["running", "running"], {"stopping": True}, "stopping"),
        (["succeeded", "succeeded"], {}, "succeeded"),
        (["succeeded", "failed"], {}, "failed"),
        (["stopped", "succeeded"], {}, "stopped"),
        (["failed", "stopped"], {}, "failed"),
        (["pending", "succeeded"], {}, "starting"),
    ],
)
def test_job_status_follows_its_tasks(
    tasks: list[str], flags: dict[str, bool], expected: str
) -> None:
    options = {"queued": False, "scheduled": False, "stopping": False, **flags}
    assert job_status(tasks, **options) == expected


DEFINITION = {
    "name": "train",
    "params": [{"name": "--lr", "value": "0.1", "separator": "="}],
    "env": {"WANDB_MODE": "offline"},
    "template": {"kind": "torchrun", "options": {"style": "env"}},
    "tasks": [
        {"host": "dgx1", "command": "python train.py", "gpus": [0, "1"], "env": {"A": "b c"}},
        {"host": "dgx2", "command": "python train.py", "gpus": ["GPU-x"], "role": "chief"},
    ],
    "stop_at": "2026-12-01T10:00:00+00:00",
}


def test_a_definition_survives_the_spec_column() -> None:
    loaded = load_args(DefinitionSchema(), DEFINITION)
    assert loaded["tasks"][0]["gpus"] == [0, 1]  # indexes: resolved against the host later
    job = to_job(7, "alice", loaded, {0: ("GPU-a", "GPU-b"), 1: ("GPU-x",)})
    again = from_spec(7, "alice", job.name, job.description, spec_json(job))
    assert again == job
    assert again.tasks[0].gpus == ("GPU-a", "GPU-b")
    assert again.tasks[1].role == "chief"
    assert again.params[0].separator == "="
    assert loaded["stop_at"] == datetime(2026, 12, 1, 10, tzinfo=UTC)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"tasks": []}, "tasks"),
        ({"name": ""}, "name"),
        ({"tasks": [{"host": "h", "command": ""}]}, "tasks"),
        ({"tasks": [{"host": "h", "command": "x", "gpus": [True]}]}, "tasks"),
        ({"tasks": [{"host": "h", "command": "x", "gpu_count": 0}]}, "tasks"),
        ({"params": [{"name": "--x", "separator": ":"}]}, "params"),
        ({"template": {"kind": "mpirun"}}, "template"),
        ({"queued": True, "start_at": "2026-12-01T10:00:00+00:00"}, "_schema"),
        (
            {"start_at": "2026-12-01T10:00:00+00:00", "stop_at": "2026-12-01T09:00:00+00:00"},
            "stop_at",
        ),
        ({"start_at": "2026-12-01T10:00:00"}, "start_at"),  # no offset
        ({"max_runtime_s": 0}, "max_runtime_s"),
    ],
)
def test_bad_definitions_name_the_field(change: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidRequest) as caught:
        load_args(DefinitionSchema(), {**DEFINITION, **change})
    assert field in caught.value.details["errors"]
