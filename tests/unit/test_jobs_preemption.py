"""The queue pass's examples of preemption (interrupt within the lead, then kill) and of the
anti-starvation hold; the rules and helpers are in test_jobs_scheduler.py.
"""

from __future__ import annotations

from dataclasses import replace

from services.jobs.queue.model import (
    Interrupt,
    Kill,
    RunningJob,
    Start,
)
from services.jobs.queue.scheduler import schedule
from tests.unit.test_jobs_scheduler import (
    MIN,
    NOW,
    H,
    any_n,
    at,
    book,
    busy,
    gpus_of,
    job,
    starts,
    state,
    waits,
)

# --- examples: preemption --------------------------------------------------------------------


def running_on(
    *uuids: str, preemptible: bool = True, done: frozenset[int] = frozenset()
) -> RunningJob:
    return RunningJob(7, "ann", frozenset(uuids), preemptible, done)


def test_interrupt_within_the_lead() -> None:
    bookings = {"a-1": [book(3, "bob", 4, 60)]}
    s = state(gpus_of(a=2), bookings=bookings, running=[running_on("a-0", "a-1")])
    assert schedule(s) == [Interrupt(7, 3, at(4))]
    assert schedule(replace(s, preempt_lead=3 * MIN)) == []  # not yet


def test_not_interrupted_twice_for_the_same_reservation() -> None:
    bookings = {"a-0": [book(3, "bob", 4, 60)], "a-1": [book(4, "cy", 5, 60)]}
    s = state(
        gpus_of(a=2), bookings=bookings, running=[running_on("a-0", "a-1", done=frozenset({3}))]
    )
    assert schedule(s) == [Interrupt(7, 4, at(5))]  # the other one is new
    s = replace(s, running=[running_on("a-0", "a-1", done=frozenset({3, 4}))])
    assert schedule(s) == []


def test_kill_when_the_reservation_starts_and_kill_wins() -> None:
    bookings = {"a-0": [book(3, "bob", 0, 60)], "a-1": [book(4, "cy", 2, 60)]}
    s = state(
        gpus_of(a=2), bookings=bookings, running=[running_on("a-0", "a-1", done=frozenset({3}))]
    )
    assert schedule(s) == [Kill(7, 3)]


def test_own_guest_or_past_reservations_and_jobs_not_from_the_queue_are_left_alone() -> None:
    bookings = {
        "a-0": [book(1, "bob", -60, 0), book(2, "ann", 0, 60)],
        "a-1": [book(3, "bob", 1, 60, frozenset({"ann"}))],
    }
    s = state(gpus_of(a=2), bookings=bookings, running=[running_on("a-0", "a-1")])
    assert schedule(s) == []
    other = {"a-0": [book(5, "bob", -5, 60)]}
    s = state(gpus_of(a=2), bookings=other, running=[running_on("a-0", preemptible=False)])
    assert schedule(s) == []


def test_preemptions_come_before_the_queue() -> None:
    bookings = {"a-0": [book(3, "bob", -1, 60)]}
    s = state(gpus_of(a=2), [job(1, "cy", any_n(1))], bookings, running=[running_on("a-0")])
    assert schedule(s) == [Kill(7, 3), Start(1, {0: ("a", ("a-1",))})]


# --- examples: the anti-starvation hold ------------------------------------------------------


def test_without_the_hold_a_small_job_takes_what_a_big_one_waits_for() -> None:
    gpus = busy(gpus_of(a=4), "a-3")
    queue = [job(1, "ann", any_n(4)), job(2, "bob", any_n(1))]
    assert 2 in starts(schedule(state(gpus, queue)))


def test_the_hold_keeps_free_gpus_for_the_job_waiting_longest() -> None:
    gpus = busy(gpus_of(a=4, b=4), "a-3", "b-2", "b-3")
    queue = [job(1, "ann", any_n(4)), job(2, "bob", any_n(1)), job(3, "cy", any_n(2))]
    decisions = schedule(state(gpus, queue, hold_after=H))
    # ann's job is blocked only by busy GPUs: it keeps a-0..a-2 (the host with most free)
    assert waits(decisions)[1] == (
        "no host has 4 free GPUs for 1 h (waiting longest: 3 free GPUs kept for it)"
    )
    assert starts(decisions)[2].placement == {0: ("b", ("b-0",))}
    assert waits(decisions)[3] == "no host has 2 free GPUs for 1 h"


def test_the_hold_waits_for_hold_after_and_ignores_jobs_blocked_by_reservations() -> None:
    gpus = busy(gpus_of(a=2), "a-1")
    queue = [job(1, "ann", any_n(2)), job(2, "bob", any_n(1))]
    s = state(gpus, queue, hold_after=2 * H)
    young = replace(s, queue=[replace(queue[0], enqueued_at=NOW - H), queue[1]])
    assert 2 in starts(schedule(young))
    assert 2 in waits(schedule(s))
    blocked = replace(s, bookings={"a-1": [book(1, "cy", 10, 20)]})
    assert 2 in starts(schedule(blocked))  # a reservation stands in its way: no hold
