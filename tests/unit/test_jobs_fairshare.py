"""Fair share (services/jobs/queue/fairshare.py): decayed usage, shares, the order, and that
the real queue pass follows it (a heavy user's queue does not block a light user's job)."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

from hypothesis import given
from hypothesis import strategies as st

from services.jobs.queue.fairshare import (
    Policy,
    Usage,
    decayed_usage,
    fair_order,
    fifo_order,
    order,
    shares,
    standings,
)
from services.jobs.queue.forecast import Running, predict_starts
from services.jobs.queue.model import Demand, Gpu, QueuedJob, QueueState, Start
from services.jobs.queue.scheduler import schedule

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
WEEK = timedelta(days=7)


def job(job_id: int, owner: str, enqueued_h: float, gpus: int = 1, hours: float = 1) -> QueuedJob:
    return QueuedJob(
        job_id, owner, NOW + enqueued_h * H, (Demand(0, None, gpu_count=gpus),), hours * H
    )


def ids(jobs: list[QueuedJob]) -> list[int]:
    return [j.job_id for j in jobs]


# --- usage and shares --------------------------------------------------------------------------


def test_an_hour_one_half_life_ago_counts_half() -> None:
    used = [Usage("ann", 2, NOW - WEEK - H, NOW - WEEK), Usage("bob", 2, NOW - H, NOW)]
    got = decayed_usage(used, NOW, WEEK)
    assert math.isclose(got["ann"] * 2, got["bob"], rel_tol=1e-2)
    assert math.isclose(got["bob"], 2.0, rel_tol=1e-2)


def test_only_the_past_counts() -> None:
    used = [Usage("ann", 4, NOW - H, NOW + 10 * H), Usage("bob", 8, NOW + H, NOW + 2 * H)]
    got = decayed_usage(used, NOW, WEEK)
    assert math.isclose(got["ann"], 4.0, rel_tol=1e-2)
    assert "bob" not in got


def test_shares_are_equal_unless_a_group_weighs_more() -> None:
    assert shares(["ann", "bob"], {}, None) == {"ann": 0.5, "bob": 0.5}
    got = shares(["ann", "bob", "cy"], {"ann": ["vision", "all"], "cy": ["all"]}, {"vision": 2})
    assert got == {"ann": 0.5, "bob": 0.25, "cy": 0.25}


# --- the order ---------------------------------------------------------------------------------


def test_a_light_users_job_goes_before_a_heavy_users_fifty() -> None:
    queue = [job(i, "heavy", -10 + i * 0.01) for i in range(50)] + [job(99, "light", 0)]
    got = fair_order(queue, {"heavy": 500.0}, {"heavy": 0.5, "light": 0.5}, NOW, Policy())
    assert got[0].job_id == 99
    assert ids(fifo_order(queue))[-1] == 99


def test_users_with_equal_usage_take_turns_oldest_first() -> None:
    queue = [job(1, "ann", 0), job(2, "ann", 1), job(3, "bob", 2), job(4, "bob", 3)]
    got = fair_order(queue, {}, {"ann": 0.5, "bob": 0.5}, NOW, Policy())
    assert ids(got) == [1, 3, 2, 4]


def test_a_heavier_share_gets_more_turns() -> None:
    queue = [job(i, "ann", i) for i in range(4)] + [job(10 + i, "bob", i) for i in range(4)]
    got = fair_order(queue, {}, {"ann": 2 / 3, "bob": 1 / 3}, NOW, Policy(min_window=H))
    assert ids(got)[:6] == [0, 10, 1, 11, 2, 3]  # ann four of the first six


def test_a_job_that_waited_past_starve_after_goes_first() -> None:
    old = job(1, "heavy", -30)  # waited 30 h
    queue = [old, job(2, "light", -1)]
    policy = Policy(starve_after=timedelta(hours=24))
    got = fair_order(queue, {"heavy": 1e6}, {"heavy": 0.5, "light": 0.5}, NOW, policy)
    assert ids(got) == [1, 2]
    assert ids(
        fair_order(
            queue, {"heavy": 1e6}, {"heavy": 0.5, "light": 0.5}, NOW, Policy(starve_after=None)
        )
    ) == [2, 1]


@given(
    st.lists(
        st.tuples(st.sampled_from("abcd"), st.floats(-100, 0), st.floats(0, 1e4)),
        min_size=1,
        max_size=30,
    )
)
def test_starved_jobs_lead_and_every_job_appears_once(
    rows: list[tuple[str, float, float]],
) -> None:
    queue = [job(i, owner, enq) for i, (owner, enq, _) in enumerate(rows)]
    usage = {owner: used for owner, _, used in rows}
    policy = Policy(starve_after=timedelta(hours=48))
    stand = standings(queue, [], {}, NOW, policy)
    got = fair_order(queue, usage, {u: s.share for u, s in stand.items()}, NOW, policy)
    assert sorted(ids(got)) == sorted(ids(queue))
    starved = [NOW - j.enqueued_at >= timedelta(hours=48) for j in got]
    assert starved == sorted(starved, reverse=True)  # every starved job before the others
    for owner in usage:  # each user's jobs stay in their own FIFO order
        mine = [j for j in got if j.owner == owner and NOW - j.enqueued_at < timedelta(hours=48)]
        assert mine == sorted(mine, key=lambda j: (j.enqueued_at, j.job_id))


def test_a_waiting_heavy_users_usage_decays_until_they_go_first() -> None:
    """No starvation even without starve_after: while the heavy user waits and the light user
    keeps running, their usages cross."""
    heavy = [Usage("heavy", 8, NOW - 10 * 24 * H, NOW - 3 * 24 * H)]
    policy = Policy(starve_after=None)
    queue = [job(1, "heavy", 0), job(2, "light", 1)]
    crossed = None
    for day in range(60):
        t = NOW + day * 24 * H
        light = [Usage("light", 1, NOW, t)]
        stand = standings(queue, heavy + light, {}, t, policy)
        if ids(order(queue, stand, t, policy))[0] == 1:
            crossed = day
            break
    assert crossed is not None and crossed < 60


# --- the pass follows it -------------------------------------------------------------------------


def test_heavy_users_fifty_jobs_block_the_light_one_no_longer_than_one_running_jobs_end() -> None:
    gpus = {f"h-{i}": Gpu(f"h-{i}", "h", i, True) for i in range(8)}  # all busy: heavy's jobs
    running = [Running(100 + i, frozenset({f"h-{i}"}), NOW + (i + 1) * H) for i in range(8)]
    queue = [job(i, "heavy", -5 + i * 0.01) for i in range(50)] + [job(99, "light", 0)]
    periods = [Usage("heavy", 8, NOW - 24 * H, NOW)]
    policy = Policy()
    stand = standings(queue, periods, {}, NOW, policy)
    fair = ids(order(queue, stand, NOW, policy))
    state = QueueState(NOW, gpus, {}, queue, order=fair)
    predicted = predict_starts(state, running, {}, NOW + 30 * 24 * H)
    assert predicted[99] == NOW + H  # the first running job's end
    # and the pass at that moment gives the freed GPU to the light user
    freed = {u: Gpu(u, "h", g.index, u != "h-0") for u, g in gpus.items()}
    decisions = schedule(QueueState(NOW + H, freed, {}, queue, order=fair))
    started = [d.job_id for d in decisions if isinstance(d, Start)]
    assert started == [99]
    fifo = ids(order(queue, stand, NOW, policy, fair=False))
    assert (
        predict_starts(
            QueueState(NOW, gpus, {}, queue, order=fifo), running, {}, NOW + 30 * 24 * H
        )[99]
        > NOW + 6 * H
    )
