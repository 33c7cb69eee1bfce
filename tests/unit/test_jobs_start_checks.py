"""What is checked before a job starts: the placement its tasks name, how long its GPUs must be
usable, and the error a refusal of the reservations service becomes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from services.jobs.domain import Job, Task
from services.jobs.start_checks import (
    START_CHECK_WINDOW,
    fixed_placement,
    refusal_error,
    run_until,
)
from services.jobs.state import JobState, TaskRun
from services.shared.errors import NotAllowed, ReservationConflict, StateConflict

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)


def job_state(*tasks: Task, **fields: object) -> JobState:
    job = Job(id=7, owner="ann", name="train", tasks=tasks)
    state = JobState(job=job, created_at=NOW, updated_at=NOW, tasks=[TaskRun() for _ in tasks])
    for name, value in fields.items():
        setattr(state, name, value)
    return state


def test_the_fixed_placement_is_each_tasks_own_host_and_gpus() -> None:
    state = job_state(Task(0, "dgx1", "a", gpus=("u0", "u1")), Task(1, "dgx2", "b"))
    assert fixed_placement(state) == {0: ("dgx1", ("u0", "u1")), 1: ("dgx2", ())}


@pytest.mark.parametrize(
    "task", [Task(0, None, "a", gpu_count=2), Task(0, "dgx1", "a", gpu_count=2)]
)
def test_a_task_asking_for_any_gpus_has_no_fixed_placement(task: Task) -> None:
    with pytest.raises(StateConflict, match="queue the job"):
        fixed_placement(job_state(task))


def test_the_gpus_must_be_usable_until_the_stop_time_else_the_run_time_else_a_minute() -> None:
    task = Task(0, "dgx1", "a")
    later, minute = NOW + timedelta(hours=3), timedelta(seconds=60)
    assert run_until(job_state(task, stop_at=later, max_runtime_s=60.0), NOW) == later
    assert run_until(job_state(task, stop_at=NOW, max_runtime_s=60.0), NOW) == NOW + minute
    assert run_until(job_state(task), NOW) == NOW + START_CHECK_WINDOW


def test_only_conflicts_make_a_reservation_conflict_and_the_message_names_three() -> None:
    conflicts = [{"code": "conflict", "message": f"taken {i}"} for i in range(5)]
    error = refusal_error(conflicts)
    assert isinstance(error, ReservationConflict)
    assert error.message == "taken 0; taken 1; taken 2 (and 2 more)"
    assert error.details == {"reasons": conflicts}
    mixed = [*conflicts[:1], {"code": "quota", "message": "over quota"}]
    assert isinstance(refusal_error(mixed), NotAllowed)
