"""The queue and maintenance windows: no queued work is placed on a drained GPU where it would
run into its window (a window drains it for everyone, booking owners too), running jobs are not
interrupted by one, and the jobs service's copy of the windows (`services/jobs/drains.py`)."""

from __future__ import annotations

from datetime import timedelta

from services.jobs.drains import DrainBook
from services.jobs.queue.model import RunningJob
from services.jobs.queue.scheduler import schedule
from tests.unit.test_jobs_scheduler import (
    NOW,
    any_n,
    at,
    book,
    gpus_of,
    job,
    named,
    starts,
    state,
    waits,
)


def test_no_work_goes_to_a_gpu_drained_now_or_before_the_job_would_end() -> None:
    gpus = gpus_of(a=2, b=2)
    drained = {"a-0": [(at(-10), None)], "a-1": [(at(30), at(90))]}
    decisions = schedule(state(gpus, [job(1, "ann", any_n(2))], drained=drained))
    assert starts(decisions)[1].placement == {0: ("b", ("b-0", "b-1"))}
    # A window that begins after the job's hour leaves the GPU usable.
    later = {"a-0": [(at(61), None)], "a-1": [(at(61), None)]}
    decisions = schedule(state(gpus_of(a=2), [job(1, "ann", any_n(2))], drained=later))
    assert starts(decisions)[1].placement == {0: ("a", ("a-0", "a-1"))}
    # A window that is over drains nothing.
    over = {"a-0": [(at(-60), at(-1))]}
    decisions = schedule(state(gpus_of(a=1), [job(1, "ann", named("a-0"))], drained=over))
    assert 1 in starts(decisions)


def test_a_named_drained_gpu_waits_and_says_why_even_for_the_owner_of_its_booking() -> None:
    gpus = gpus_of(a=1)
    bookings = {"a-0": [book(1, "ann", -10, 600)]}
    drained = {"a-0": [(at(20), at(40))]}
    decisions = schedule(state(gpus, [job(1, "ann", named("a-0"))], bookings, drained=drained))
    assert waits(decisions) == {1: "GPU a:0 is drained for maintenance (1 h needed)"}
    decisions = schedule(state(gpus, [job(1, "ann", any_n(1))], bookings, drained=drained))
    assert waits(decisions) == {1: "no host has 1 free GPUs for 1 h"}


def test_a_running_job_is_not_interrupted_by_a_window() -> None:
    running = [RunningJob(7, "bob", frozenset({"a-0"}), preemptible=True)]
    drained = {"a-0": [(at(-5), None)]}
    decisions = schedule(state(gpus_of(a=1), [], running=running, drained=drained))
    assert decisions == []


def window(window_id: int, **data: object) -> dict[str, object]:
    return {
        "id": window_id,
        "host": "a",
        "gpus": [0],
        "start": at(10).isoformat(),
        "end": None,
        "status": "scheduled",
        **data,
    }


def test_jobs_are_stopped_only_on_windows_that_ask_for_it_once_they_begin() -> None:
    gpus = {"a-0": ("a", 0), "a-1": ("a", 1)}
    drains = DrainBook()
    drains.load([window(1, target="a:0", reason="fan", stop_jobs=True), window(2, gpus=[1])])
    assert drains.stopping(gpus, NOW) == {}  # not begun yet
    assert drains.stopping(gpus, at(10)) == {"a-0": "maintenance of a:0: fan"}
    drains.apply("maintenance.ended", window(1, end=at(11).isoformat(), status="ended"))
    assert drains.stopping(gpus, at(11)) == {}


def test_the_jobs_copy_of_the_windows_follows_the_events() -> None:
    gpus = {"a-0": ("a", 0), "a-1": ("a", 1), "b-0": ("b", 0)}
    drains = DrainBook()
    drains.load([window(1), window(2, host="b", gpus=None, end=at(30).isoformat())])
    assert drains.by_gpu(gpus, NOW) == {"a-0": [(at(10), None)], "b-0": [(at(10), at(30))]}
    # A window announced before the start-up load answered is kept as the event said.
    drains.apply("maintenance.scheduled", window(3, gpus=None, start=at(5).isoformat()))
    drains.load([window(3, gpus=[1])])
    assert drains.by_gpu(gpus, NOW)["a-1"] == [(at(5), None)]
    drains.apply("maintenance.ended", window(1, end=at(12).isoformat(), status="ended"))
    drains.apply("maintenance.ended", window(3, status="removed"))
    assert drains.by_gpu(gpus, NOW) == {"a-0": [(at(10), at(12))], "b-0": [(at(10), at(30))]}
    assert drains.by_gpu(gpus, NOW + timedelta(minutes=31)) == {}
