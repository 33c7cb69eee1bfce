"""Hand-back and failures of queued jobs, the pure parts: a job's own hand-back grace in the
queue pass, its definition's hand-back fields, whether a run that ended goes back to the queue,
and how a failed run is told apart (services.jobs.failures)."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest
from marshmallow import ValidationError

from services.client.render import describe_job
from services.jobs import failures
from services.jobs.api import DefinitionSchema
from services.jobs.domain import Handback, Job, Task
from services.jobs.queue.model import Interrupt, Kill, RunningJob
from services.jobs.queue.scheduler import schedule
from services.jobs.spec import definition_of, from_spec, spec_json, to_job
from services.jobs.state import JobState, TaskRun
from services.jobs.working_state import requeue_wanted
from tests.unit.test_jobs_scheduler import MIN, at, book, gpus_of, state

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)

# --- the queue pass: each job's own grace ------------------------------------------------------


def running(lead: timedelta | None, done: frozenset[int] = frozenset()) -> RunningJob:
    return RunningJob(7, "ann", frozenset({"a-0"}), True, done, lead=lead)


def test_a_job_gets_its_signal_its_own_grace_before_the_reservation() -> None:
    bookings = {"a-0": [book(3, "bob", 10, 60)]}  # bob's reservation starts in 10 min
    site = state(gpus_of(a=1), bookings=bookings, preempt_lead=5 * MIN)
    assert schedule(replace(site, running=[running(None)])) == []  # the site's 5 min: not yet
    assert schedule(replace(site, running=[running(15 * MIN)])) == [Interrupt(7, 3, at(10))]
    assert schedule(replace(site, running=[running(2 * MIN)])) == []
    # its own short grace: signalled 2 min before, once; killed at the start
    soon = replace(site, now=at(8), running=[running(2 * MIN)])
    assert schedule(soon) == [Interrupt(7, 3, at(10))]
    assert schedule(replace(soon, running=[running(2 * MIN, frozenset({3}))])) == []
    started = replace(site, now=at(10), running=[running(2 * MIN, frozenset({3}))])
    assert schedule(started) == [Kill(7, 3)]


def test_a_zero_grace_means_killed_at_the_start_without_a_signal_before() -> None:
    bookings = {"a-0": [book(3, "bob", 1, 60)]}
    s = state(gpus_of(a=1), bookings=bookings, running=[running(timedelta(0))])
    assert schedule(s) == []
    assert schedule(replace(s, now=at(1))) == [Kill(7, 3)]


# --- the definition ------------------------------------------------------------------------


def definition(**fields: object) -> dict[str, object]:
    return {"name": "train", "tasks": [{"command": "python train.py", "gpu_count": 1}], **fields}


def test_the_hand_back_fields_default_and_round_trip() -> None:
    loaded = DefinitionSchema().load(definition(queued=True))
    assert to_job(1, "ann", loaded).handback == Handback("TERM", None, None, "tell")
    loaded = DefinitionSchema().load(
        definition(
            queued=True,
            handback_signal="USR1",
            handback_grace_s=90,
            requeue=False,
            on_time_limit="stop",
            max_runtime_s=3600,
        )
    )
    job = to_job(1, "ann", loaded)
    assert job.handback == Handback("USR1", 90.0, False, "stop")
    assert from_spec(1, "ann", job.name, job.description, spec_json(job)) == job
    assert definition_of(job)["handback_signal"] == "USR1"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("handback_signal", "KILL"),  # not a hand-back: it cannot be caught
        ("handback_signal", "HUP"),
        ("handback_grace_s", -1),
        ("on_time_limit", "kill"),
        ("requeue", "maybe"),
    ],
)
def test_bad_hand_back_fields_are_refused(field: str, value: object) -> None:
    with pytest.raises(ValidationError) as refused:
        DefinitionSchema().load(definition(queued=True, **{field: value}))
    assert field in refused.value.messages


# --- back to the queue? --------------------------------------------------------------------


def job_state(requeue: bool | None = None, **kw: object) -> JobState:
    job = Job(1, "ann", "train", (Task(0, None, "python train.py", gpu_count=1),))
    job = replace(job, handback=Handback(requeue=requeue))
    return JobState(job, T0, T0, [TaskRun(status="stopped", run=1)], from_queue=True, **kw)  # type: ignore[arg-type]


def test_what_sends_a_job_back_to_the_queue() -> None:
    yielded = {"interrupted_for": {3}, "stop_reason": "yields to reservation 3"}
    assert requeue_wanted(job_state(**yielded), site_default=True)
    assert not requeue_wanted(job_state(**yielded), site_default=False)
    assert requeue_wanted(job_state(True, **yielded), site_default=False)  # the job says so
    assert not requeue_wanted(job_state(False, **yielded), site_default=True)
    broken = {"failure": failures.INFRASTRUCTURE, "failure_reason": "dgx1 GPU 0 failed"}
    assert requeue_wanted(job_state(**broken), site_default=True)
    assert not requeue_wanted(job_state(False, **broken), site_default=True)
    assert not requeue_wanted(job_state(failure=failures.EARLY), site_default=True)
    assert not requeue_wanted(job_state(), site_default=True)  # it just ended


# --- how a run failed ----------------------------------------------------------------------


def ending(
    status: str = "failed",
    exit_code: int | None = 1,
    ran_s: float = 30,
    before: str = "running",
    stopped: bool = False,
    infrastructure: str | None = None,
) -> failures.Ending:
    return failures.Ending(
        status, before, exit_code, T0, T0 + timedelta(seconds=ran_s), stopped, infrastructure
    )


def test_a_failure_of_its_own_in_its_first_minutes_is_early() -> None:
    assert failures.classify(ending(exit_code=2, ran_s=12), 300) == failures.EARLY
    assert failures.classify(ending(exit_code=2, ran_s=299.9), 300) == failures.EARLY
    assert failures.classify(ending(exit_code=2, ran_s=300), 300) == failures.LATE
    assert failures.classify(ending(exit_code=2, ran_s=12), 0) == failures.LATE  # off


def test_what_is_not_a_failure_of_its_own() -> None:
    assert failures.classify(ending("succeeded", exit_code=0), 300) is None
    assert failures.classify(ending("stopped", exit_code=143), 300) is None
    assert failures.classify(ending(exit_code=143, stopped=True), 300) is None  # we stopped it
    # gone without a status after its host was lost: the host's doing
    assert failures.classify(ending(exit_code=None, before="lost"), 300) == failures.INFRASTRUCTURE
    assert failures.classify(ending(exit_code=None), 300) == failures.LATE  # killed by someone


def test_a_failed_gpu_under_it_wins_over_its_own_exit_status() -> None:
    gpu = "dgx1 GPU 0 failed: Xid 79"
    assert (
        failures.classify(ending(exit_code=1, infrastructure=gpu), 300) == failures.INFRASTRUCTURE
    )
    assert failures.classify(ending("stopped", 143, infrastructure=gpu), 300) == (
        failures.INFRASTRUCTURE
    )
    assert failures.classify(ending("succeeded", 0, infrastructure=gpu), 300) is None


def test_the_early_failure_note_carries_the_tail_of_the_output() -> None:
    log = "".join(f"line {i}\n" for i in range(100)) + "Traceback: FileNotFoundError\n"
    tail = failures.output_tail(log)
    assert tail.splitlines() == [f"line {i}" for i in range(81, 100)] + [
        "Traceback: FileNotFoundError"
    ]
    title, text = failures.early_failure_note(5, "train", 0, 1, 12.0, tail)
    assert title == "Job train failed (exit status 1)"
    assert "after 12 s" in text and "not retried" in text and text.endswith(tail)
    assert "no output" in failures.early_failure_note(5, "train", 0, 1, 1.0, "")[1]


# --- the CLI's line for a job ----------------------------------------------------------------


def test_the_cli_says_how_a_job_failed_and_how_often_it_handed_back() -> None:
    job = {"id": 5, "name": "typo", "status": "failed", "interruptions": 0}
    assert describe_job(job) == "job 5 (typo): failed"
    job.update(failure="early", failure_reason="task 0 exited with status 2 on its own")
    assert describe_job(job) == (
        "job 5 (typo): failed (early: task 0 exited with status 2 on its own)"
    )
    resumed = {"id": 6, "name": "resnet", "status": "queued", "interruptions": 2}
    assert describe_job(resumed) == "job 6 (resnet): queued, handed back 2 times"
