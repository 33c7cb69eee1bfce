"""Locality in the earliest slot and the jobs' placement: on a host of two NVLink quads, "any 4"
takes one quad every time, a 4-task job lands on one quad; small work packs onto partly used
hosts (or spreads when the admin says so)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.jobs.queue.model import Demand, Gpu, QueuedJob, QueueState, Start
from services.jobs.queue.scheduler import schedule
from services.reservations.rules.domain import Gpu as ResvGpu
from services.reservations.rules.domain import Interval
from services.reservations.rules.planner import Locality, earliest_slot
from services.shared.topology import SPREAD
from services.shared.topology_shapes import shape

T0 = datetime(2026, 3, 2, 9, 0, tzinfo=UTC)
H = timedelta(hours=1)
QUADS = shape("nvlink-quads", 8)
QUAD_OF = {i: i // 4 for i in range(8)}
EVER = [Interval(T0 - 1000 * H, T0 + 1000 * H)]


def resv_gpus(*hosts: str, count: int = 8) -> list[ResvGpu]:
    return [ResvGpu(f"{h}-{i}", h, i) for h in hosts for i in range(count)]


def index_of(uuid: str) -> int:
    return int(uuid.rsplit("-", 1)[1])


# Busy GPUs of one host, leaving at least one quad wholly free.
busy_st = st.sets(st.integers(0, 7)).filter(lambda s: not {0, 1, 2, 3} & s or not {4, 5, 6, 7} & s)


@settings(max_examples=80, deadline=None)
@given(busy=busy_st)
def test_any_4_on_two_quads_takes_one_quad_every_time(busy: set[int]) -> None:
    gpus = resv_gpus("gpu-01")
    busy_now = {f"gpu-01-{i}": [Interval(T0 - H, T0 + 5 * H)] for i in busy}
    allowed = {g.uuid: EVER for g in gpus}
    slot = earliest_slot(
        gpus, allowed, busy_now, 4, H, T0, T0 + 100 * H, locality=Locality({"gpu-01": QUADS})
    )
    assert slot is not None and slot.start == T0
    assert len({QUAD_OF[index_of(u)] for u in slot.gpus}) == 1
    assert slot.why == "4 GPUs joined by NVLink on gpu-01"


def test_any_4_prefers_the_quad_over_the_partly_used_host_then_packs() -> None:
    gpus = resv_gpus("a", "b", "c")
    allowed = {g.uuid: EVER for g in gpus}
    # a: 0 and 4 busy (six free, no whole quad); b: all free; c: 0..3 busy (one quad free)
    busy = {u: [Interval(T0, T0 + 5 * H)] for u in ("a-0", "a-4", "c-0", "c-1", "c-2", "c-3")}
    locality = Locality({"a": QUADS, "b": QUADS, "c": QUADS})
    slot = earliest_slot(gpus, allowed, busy, 4, H, T0, T0 + 10 * H, locality=locality)
    assert slot is not None and slot.gpus == ("c-4", "c-5", "c-6", "c-7")
    spread = Locality(locality.topologies, SPREAD)
    slot = earliest_slot(gpus, allowed, busy, 4, H, T0, T0 + 10 * H, locality=spread)
    assert slot is not None and slot.gpus == ("b-0", "b-1", "b-2", "b-3")
    # same_host gives the same answers
    slot = earliest_slot(gpus, allowed, busy, 4, H, T0, T0 + 10 * H, True, locality=locality)
    assert slot is not None and slot.gpus == ("c-4", "c-5", "c-6", "c-7")


def test_one_gpu_packs_onto_the_partly_used_host() -> None:
    gpus = resv_gpus("a", "b")
    allowed = {g.uuid: EVER for g in gpus}
    busy = {"b-3": [Interval(T0, T0 + 5 * H)]}
    slot = earliest_slot(gpus, allowed, busy, 1, H, T0, T0 + 10 * H)
    assert slot is not None and slot.gpus == ("b-0",)
    slot = earliest_slot(gpus, allowed, busy, 1, H, T0, T0 + 10 * H, locality=Locality({}, SPREAD))
    assert slot is not None and slot.gpus == ("a-0",)


def test_more_than_a_host_holds_goes_to_the_fewest_hosts() -> None:
    gpus = resv_gpus("a", "b", "c", count=4)
    allowed = {g.uuid: EVER for g in gpus}
    busy = {u: [Interval(T0, T0 + 5 * H)] for u in ("a-0", "a-1", "a-2", "c-0")}
    slot = earliest_slot(gpus, allowed, busy, 6, H, T0, T0 + 2 * H)
    assert slot is not None and slot.start == T0
    assert {u.split("-")[0] for u in slot.gpus} == {"b", "c"}
    assert slot.why is not None and "2 hosts" in slot.why


# --- jobs ----------------------------------------------------------------------------------------


def queue_state(
    busy: set[int], *jobs: QueuedJob, hosts: tuple[str, ...] = ("gpu-01",)
) -> QueueState:
    gpus = {
        f"{h}-{i}": Gpu(f"{h}-{i}", h, i, h == hosts[0] and i in busy)
        for h in hosts
        for i in range(8)
    }
    return QueueState(
        now=T0,
        gpus=gpus,
        bookings={},
        queue=list(jobs),
        topologies={h: QUADS for h in hosts},
    )


def started(decisions: Sequence[object]) -> dict[int, Start]:
    return {d.job_id: d for d in decisions if isinstance(d, Start)}


@settings(max_examples=80, deadline=None)
@given(busy=busy_st)
def test_a_4_task_job_lands_on_one_quad(busy: set[int]) -> None:
    tasks = tuple(Demand(i, None, gpu_count=1) for i in range(4))
    decisions = schedule(queue_state(busy, QueuedJob(1, "ann", T0, tasks)))
    start = started(decisions)[1]
    uuids = [u for _, gpus in start.placement.values() for u in gpus]
    assert len(uuids) == 4 and {u.rsplit("-", 1)[0] for u in uuids} == {"gpu-01"}
    assert len({QUAD_OF[index_of(u)] for u in uuids}) == 1


@settings(max_examples=80, deadline=None)
@given(busy=busy_st)
def test_a_4_gpu_task_takes_one_quad(busy: set[int]) -> None:
    decisions = schedule(
        queue_state(busy, QueuedJob(1, "ann", T0, (Demand(0, None, gpu_count=4),)))
    )
    [(host, uuids)] = started(decisions)[1].placement.values()
    assert host == "gpu-01"
    assert len({QUAD_OF[index_of(u)] for u in uuids}) == 1


def test_two_2_gpu_tasks_take_two_nvlink_pairs_of_one_quad() -> None:
    pairs = shape("nvlink-pairs", 8)
    state = queue_state(
        set(), QueuedJob(1, "ann", T0, (Demand(0, None, gpu_count=2), Demand(1, None, gpu_count=2)))
    )
    state = QueueState(
        **{**{f: getattr(state, f) for f in state.__slots__}, "topologies": {"gpu-01": pairs}}
    )
    placement = started(schedule(state))[1].placement
    assert placement == {
        0: ("gpu-01", ("gpu-01-0", "gpu-01-1")),
        1: ("gpu-01", ("gpu-01-2", "gpu-01-3")),
    }


def test_jobs_pack_onto_the_partly_used_host_or_spread() -> None:
    two = ("a", "b")
    job = QueuedJob(1, "ann", T0, (Demand(0, None, gpu_count=2),))
    packed = started(schedule(queue_state({0}, job, hosts=two)))[1].placement
    assert packed[0][0] == "a"  # a has a GPU busy: b stays whole
    state = queue_state({0}, job, hosts=two)
    spread = QueueState(**{**{f: getattr(state, f) for f in state.__slots__}, "packing": SPREAD})
    assert started(schedule(spread))[1].placement[0][0] == "b"
