"""Predicted starts (services/jobs/queue/forecast.py) against a calendar worked by hand, and
the run-time estimate learned from a user's earlier runs."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.jobs.queue.forecast import (
    PastRun,
    Running,
    arrivals_ahead,
    estimate_runtime,
    predict_starts,
    stretched,
)
from services.jobs.queue.model import Booking, Demand, Gpu, QueuedJob, QueueState

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)


def at(minutes: int) -> datetime:
    return NOW + minutes * MIN


def job(job_id: int, owner: str, gpus: int, minutes: int) -> QueuedJob:
    return QueuedJob(
        job_id, owner, at(-100 + job_id), (Demand(0, "h", gpu_count=gpus),), minutes * MIN
    )


def calendar() -> QueueState:
    """Host h, GPUs h-0 and h-1. Job 1 runs on h-0 until +60 min. zed has h-1 booked now until
    +120 and h-0 from +150 to +200. Queued, FIFO: job 10 (ann, 1 GPU, 30 min), job 11 (bob,
    2 GPUs, 60 min), job 12 (cy, 1 GPU, 90 min).

    By hand: +0 nothing is free. +60 (job 1 ends): 10 takes h-0 until +90; 11 needs h-1 too,
    12 needs h-0 until +150, zed's. +90: 12 would run into zed's +150 on h-0, h-1 is still
    zed's. +120 (zed's first ends): 11's [120, 180) meets zed's +150 on h-0; 12 takes h-1
    until +210. +200 (zed's second ends): h-1 is 12's. +210: 11 starts.
    """
    gpus = {"h-0": Gpu("h-0", "h", 0, True), "h-1": Gpu("h-1", "h", 1, False)}
    bookings = {
        "h-0": [Booking(2, "zed", frozenset(), at(150), at(200))],
        "h-1": [Booking(1, "zed", frozenset(), at(-10), at(120))],
    }
    queue = [job(10, "ann", 1, 30), job(11, "bob", 2, 60), job(12, "cy", 1, 90)]
    return QueueState(NOW, gpus, bookings, queue, order=[10, 11, 12])


RUNNING = [Running(1, frozenset({"h-0"}), at(60))]


def test_predicted_starts_match_the_calendar_worked_by_hand() -> None:
    got = predict_starts(calendar(), RUNNING, {}, at(24 * 60))
    assert got == {10: at(60), 11: at(210), 12: at(120)}


def test_a_start_past_the_horizon_is_none() -> None:
    got = predict_starts(calendar(), RUNNING, {}, at(180))
    assert got == {10: at(60), 11: None, 12: at(120)}


def test_an_expected_duration_shorter_than_the_limit_brings_starts_forward() -> None:
    # 12 is expected to take 40 min (its limit is 90): h-1 is free again at +160, but zed's
    # +150 on h-0 still keeps 11 out until +200.
    got = predict_starts(calendar(), RUNNING, {12: 40 * MIN}, at(24 * 60))
    assert got == {10: at(60), 11: at(200), 12: at(120)}


def test_gpus_busy_outside_warden_stay_busy() -> None:
    state = calendar()
    got = predict_starts(state, [], {}, at(24 * 60))  # job 1 unknown: h-0 never frees
    # +120: 10 (first in the order) takes h-1 until +150, then 12; 11 never has two GPUs.
    assert got == {10: at(120), 11: None, 12: at(150)}


def test_runtime_is_learned_from_the_same_users_similar_jobs() -> None:
    history = [
        PastRun("ann", "train", 8, 100 * MIN),
        PastRun("ann", "train", 8, 120 * MIN),
        PastRun("ann", "train", 8, 140 * MIN),
        PastRun("ann", "debug", 1, 5 * MIN),
        PastRun("bob", "train", 8, 999 * MIN),
    ]
    assert estimate_runtime(history, "ann", "train", 8, None) == 120 * MIN
    assert estimate_runtime(history, "ann", "train", 8, 60 * MIN) == 60 * MIN
    assert estimate_runtime(history, "ann", "other", 1, None) == 5 * MIN  # same GPU count
    assert estimate_runtime(history, "cy", "train", 8, 30 * MIN) == 30 * MIN
    assert estimate_runtime(history, "cy", "train", 8, None) is None


def test_jobs_to_come_of_users_with_less_usage_stretch_the_wait() -> None:
    owners = {1: "heavy", 2: "light"}
    ratio = {"heavy": 100.0, "light": 0.0, "mid": 10.0}
    inflow = {"light": 8.0, "mid": 8.0, "heavy": 30.0}  # GPU-hours per hour
    ahead = arrivals_ahead(owners, ratio, inflow, 64, booked=16.0)
    assert ahead == {1: 0.5, 2: 0.25}  # heavy: light's, mid's and the bookings; light: bookings
    got = stretched({1: at(60), 2: at(60), 3: None}, NOW, ahead, at(24 * 60))
    assert got == {1: at(120), 2: at(80), 3: None}
    assert stretched({1: at(60)}, NOW, {1: 0.5}, at(100)) == {1: None}  # now past the horizon


def test_jobs_to_come_take_at_most_most_of_the_gpus() -> None:
    assert arrivals_ahead({1: "a"}, {"a": 1.0, "b": 0.0}, {"b": 1000.0}, 8) == {1: 0.8}
