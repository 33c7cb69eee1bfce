"""Queue scheduler: properties over random states (checked against a naive reference) and
examples for each rule (those of preemption and of the hold in test_jobs_preemption.py)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from services.jobs.queue.model import (
    Booking,
    Decision,
    Demand,
    Gpu,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    RunningJob,
    Start,
    Waiting,
)
from services.jobs.queue.scheduler import queue_order, schedule

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
MIN = timedelta(minutes=1)
H = timedelta(hours=1)
OWNERS = ("ann", "bob", "cy")


def at(minutes: int) -> datetime:
    return NOW + minutes * MIN


def gpus_of(**hosts: int) -> dict[str, Gpu]:
    """GPUs named "<host>-<index>", none busy: gpus_of(a=4, b=2)."""
    return {
        f"{host}-{i}": Gpu(f"{host}-{i}", host, i, False)
        for host, count in hosts.items()
        for i in range(count)
    }


def busy(gpus: dict[str, Gpu], *uuids: str) -> dict[str, Gpu]:
    return {u: replace(g, busy=True) if u in uuids else g for u, g in gpus.items()}


def book(
    rid: int, owner: str, start: int, end: int, guests: frozenset[str] = frozenset()
) -> Booking:
    return Booking(rid, owner, guests, at(start), at(end))


def job(
    job_id: int,
    owner: str,
    *demands: Demand,
    enqueued: int = 0,
    runtime: timedelta | None = None,
) -> QueuedJob:
    return QueuedJob(job_id, owner, at(-1000 + enqueued), tuple(demands), runtime)


def any_n(n: int, host: str | None = None, index: int = 0) -> Demand:
    return Demand(index, host, gpu_count=n)


def named(*uuids: str, index: int = 0, host: str | None = None) -> Demand:
    return Demand(index, host, gpus=uuids)


def state(
    gpus: Mapping[str, Gpu],
    queue: Sequence[QueuedJob] = (),
    bookings: Mapping[str, Sequence[Booking]] | None = None,
    **kw: object,
) -> QueueState:
    return QueueState(NOW, gpus, bookings or {}, queue, **kw)  # type: ignore[arg-type]


def starts(decisions: Sequence[Decision]) -> dict[int, Start]:
    return {d.job_id: d for d in decisions if isinstance(d, Start)}


def waits(decisions: Sequence[Decision]) -> dict[int, str]:
    return {d.job_id: d.reason for d in decisions if isinstance(d, Waiting)}


# --- the reference: what may be used, checked naively --------------------------------------


def window(s: QueueState, j: QueuedJob) -> timedelta:
    return j.max_runtime if j.max_runtime is not None else s.min_window


def reserved_for_others(s: QueueState, uuid: str, owner: str, w: timedelta) -> bool:
    return any(
        b.start < s.now + w and b.end > s.now and b.owner != owner and owner not in b.guests
        for b in s.bookings.get(uuid, ())
    )


def usable(s: QueueState, j: QueuedJob, uuid: str, taken: set[str]) -> bool:
    gpu = s.gpus.get(uuid)
    running = {u for r in s.running for u in r.gpus}
    return (
        gpu is not None
        and not gpu.busy
        and uuid not in running
        and uuid not in taken
        and uuid not in s.avoid.get(j.job_id, frozenset())
        and not reserved_for_others(s, uuid, j.owner, window(s, j))
    )


def usable_on(s: QueueState, j: QueuedJob, host: str, taken: set[str]) -> list[str]:
    on_host = [g for g in s.gpus.values() if g.host == host]
    on_host.sort(key=lambda g: (g.index is None, g.index or 0, g.uuid))
    return [g.uuid for g in on_host if usable(s, j, g.uuid, taken)]


def check_safety(s: QueueState, decisions: list[Decision]) -> None:
    """The rules every pass keeps, whatever the state."""
    order = queue_order(s.queue)
    preempt = [d for d in decisions if isinstance(d, Interrupt | Kill)]
    rest = decisions[len(preempt) :]
    assert all(isinstance(d, Start | Waiting) for d in rest)
    assert [d.job_id for d in rest] == [j.job_id for j in order]  # exactly one each, in order
    running = {u for r in s.running for u in r.gpus}
    given: set[str] = set()
    by_id = {j.job_id: j for j in s.queue}
    for d in rest:
        if isinstance(d, Waiting):
            assert d.reason
            continue
        assert isinstance(d, Start)
        j = by_id[d.job_id]
        assert sorted(d.placement) == sorted(dm.index for dm in j.demands)
        for dm in j.demands:
            host, uuids = d.placement[dm.index]
            assert len(set(uuids)) == len(uuids)
            if dm.gpus:
                assert uuids == dm.gpus
            elif (dm.gpu_count or 0) > 0:
                assert len(uuids) == dm.gpu_count
            else:
                assert uuids == () and host == dm.host
            if dm.host is not None:
                assert host == dm.host
            for u in uuids:
                gpu = s.gpus[u]
                assert gpu.host == host  # one host per task
                assert not gpu.busy and u not in running  # never on a busy GPU
                assert u not in given  # never two jobs on one GPU
                assert u not in s.avoid.get(j.job_id, frozenset())
                assert not reserved_for_others(s, u, j.owner, window(s, j))
                given.add(u)


def check_reference(s: QueueState, decisions: list[Decision]) -> None:
    """Without the hold: single-task jobs wait only when nothing fits what earlier jobs left,
    and any-N picks the best-fit host and its lowest indexes."""
    taken: set[str] = set()
    by_id = {j.job_id: j for j in s.queue}
    hosts = sorted({g.host for g in s.gpus.values()})
    for d in decisions:
        if isinstance(d, Interrupt | Kill):
            continue
        j = by_id[d.job_id]
        if len(j.demands) == 1:
            dm = j.demands[0]
            n = dm.gpu_count or 0
            if dm.gpus:
                fits = (
                    len(set(dm.gpus)) == len(dm.gpus)
                    and all(usable(s, j, u, taken) for u in dm.gpus)
                    and len({s.gpus[u].host for u in dm.gpus} | {dm.host} - {None}) == 1
                )
                assert isinstance(d, Start) == fits, (d, dm)
            elif n > 0:
                counts = {
                    h: len(usable_on(s, j, h, taken))
                    for h in ([dm.host] if dm.host is not None else hosts)
                }
                fitting = sorted((c, h) for h, c in counts.items() if c >= n)
                assert isinstance(d, Start) == bool(fitting), (d, counts)
                if isinstance(d, Start):
                    host, uuids = d.placement[dm.index]
                    assert host == fitting[0][1]  # best fit, then host name
                    assert list(uuids) == usable_on(s, j, host, taken)[:n]  # lowest indexes
            else:
                assert isinstance(d, Start) == (dm.host is not None)
        if isinstance(d, Start):
            taken.update(u for _, uuids in d.placement.values() for u in uuids)


def reference_preemptions(s: QueueState) -> list[Interrupt | Kill]:
    out: list[Interrupt | Kill] = []
    for r in s.running:
        if not r.preemptible:
            continue
        foreign = sorted(
            {
                b
                for u in r.gpus
                for b in s.bookings.get(u, ())
                if b.owner != r.owner and r.owner not in b.guests and b.end > s.now
            },
            key=lambda b: (b.start, b.reservation_id),
        )
        covering = [b for b in foreign if b.start <= s.now]
        coming = [
            b
            for b in foreign
            if s.now < b.start <= s.now + (r.lead if r.lead is not None else s.preempt_lead)
            and b.reservation_id not in r.interrupted_for
        ]
        if covering:
            out.append(Kill(r.job_id, covering[0].reservation_id))
        elif coming:
            out.append(Interrupt(r.job_id, coming[0].reservation_id, coming[0].start))
    return out


# --- random states ---------------------------------------------------------------------------


@st.composite
def states(draw: st.DrawFn, hold: bool = False) -> QueueState:  # noqa: C901 - a hypothesis strategy drawing a whole queue state
    gpus: dict[str, Gpu] = {}
    for h in range(draw(st.integers(1, 3))):
        for i in range(draw(st.integers(1, 4))):
            uuid = f"h{h}-{i}"
            index = None if h == 2 else i
            gpus[uuid] = Gpu(uuid, f"h{h}", index, draw(st.booleans()))
    uuids = sorted(gpus)
    rid = 0
    bookings: dict[str, list[Booking]] = {}
    for uuid in uuids:
        t = draw(st.integers(-180, 60))
        for _ in range(draw(st.integers(0, 3))):
            start = t + draw(st.integers(0, 120))
            end = start + draw(st.integers(1, 240))
            rid += 1
            owner = draw(st.sampled_from(OWNERS))
            guests = draw(st.frozensets(st.sampled_from(OWNERS), max_size=2)) - {owner}
            bookings.setdefault(uuid, []).append(book(rid, owner, start, end, guests))
            t = end
    free = [u for u in uuids if draw(st.integers(0, 3)) == 0]
    running: list[RunningJob] = []
    while free:
        if not draw(st.booleans()):
            break
        mine = free[: draw(st.integers(1, len(free)))]
        free = free[len(mine) :]
        ids = sorted({b.reservation_id for u in mine for b in bookings.get(u, ())})
        done: list[int] = draw(st.lists(st.sampled_from(ids), max_size=2)) if ids else []
        owner = draw(st.sampled_from(OWNERS))
        preemptible = draw(st.booleans())
        running.append(
            RunningJob(100 + len(running), owner, frozenset(mine), preemptible, frozenset(done))
        )
    hosts = sorted({g.host for g in gpus.values()})
    queue: list[QueuedJob] = []
    avoid: dict[int, frozenset[str]] = {}
    for job_id in range(1, draw(st.integers(0, 8)) + 1):
        demands = []
        for index in range(draw(st.sampled_from((1, 1, 1, 2, 3)))):
            kind = draw(st.sampled_from(("any", "any", "any_on", "named", "none")))
            if kind == "any":
                demands.append(Demand(index, None, gpu_count=draw(st.integers(1, 4))))
            elif kind == "any_on":
                host = draw(st.sampled_from([*hosts, "nowhere"]))
                demands.append(Demand(index, host, gpu_count=draw(st.integers(1, 4))))
            elif kind == "named":
                picked = draw(st.lists(st.sampled_from([*uuids, "GPU-x"]), min_size=1, max_size=3))
                on: str | None = draw(
                    st.sampled_from([None, gpus[picked[0]].host if picked[0] in gpus else None])
                )
                demands.append(Demand(index, on, gpus=tuple(picked)))
            else:
                demands.append(Demand(index, draw(st.sampled_from(hosts))))
        runtime = draw(st.sampled_from([None, 30 * MIN, H, 3 * H]))
        queue.append(
            QueuedJob(
                job_id,
                draw(st.sampled_from(OWNERS)),
                at(-draw(st.integers(0, 300))),
                tuple(demands),
                runtime,
            )
        )
        if draw(st.integers(0, 4)) == 0:
            avoid[job_id] = frozenset(draw(st.lists(st.sampled_from(uuids), max_size=3)))
    return QueueState(
        NOW,
        gpus,
        bookings,
        queue,
        running,
        avoid=avoid,
        hold_after=draw(st.sampled_from([None, H, 2 * H])) if hold else None,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states())
def test_random_states_keep_the_rules_and_match_the_reference(s: QueueState) -> None:
    decisions = schedule(s)
    check_safety(s, decisions)
    check_reference(s, decisions)
    assert [d for d in decisions if isinstance(d, Interrupt | Kill)] == reference_preemptions(s)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(states(hold=True))
def test_random_states_with_the_hold_keep_the_rules(s: QueueState) -> None:
    decisions = schedule(s)
    check_safety(s, decisions)
    kept = [d for d in decisions if isinstance(d, Waiting) and "kept for it" in d.reason]
    assert len(kept) <= 1
    if s.hold_after is None:
        assert not kept


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from((*OWNERS, "dee")), st.integers(0, 20)),
        max_size=20,
    )
)
def test_queue_order_is_round_robin_among_users_fifo_within(
    drawn: list[tuple[str, int]],
) -> None:
    queue = [QueuedJob(i, owner, at(m), ()) for i, (owner, m) in enumerate(drawn, 1)]
    ordered = queue_order(queue)
    assert sorted(j.job_id for j in ordered) == [j.job_id for j in queue]
    seen: dict[str, int] = {}
    keys = []
    for j in ordered:
        rank = seen.get(j.owner, 0)
        seen[j.owner] = rank + 1
        keys.append((rank, j.enqueued_at, j.job_id))
        mine = sorted(
            (q for q in queue if q.owner == j.owner), key=lambda q: (q.enqueued_at, q.job_id)
        )
        assert mine[rank] is j  # FIFO within a user
    assert keys == sorted(keys)  # users take turns: by rank, then age


# --- examples: order and starting ------------------------------------------------------------


def test_queue_order_takes_turns() -> None:
    queue = [
        job(1, "ann", enqueued=0),
        job(2, "ann", enqueued=1),
        job(3, "ann", enqueued=2),
        job(4, "bob", enqueued=3),
        job(5, "bob", enqueued=4),
        job(6, "cy", enqueued=5),
    ]
    assert [j.job_id for j in queue_order(queue)] == [1, 4, 6, 2, 5, 3]


def test_ties_in_enqueue_time_go_by_job_id() -> None:
    queue = [job(7, "ann"), job(3, "ann"), job(5, "bob")]
    assert [j.job_id for j in queue_order(queue)] == [3, 5, 7]


def test_backfill_a_small_job_starts_while_a_big_one_waits() -> None:
    gpus = busy(gpus_of(a=4), "a-3")
    decisions = schedule(state(gpus, [job(1, "ann", any_n(4)), job(2, "bob", any_n(2))]))
    assert waits(decisions) == {1: "no host has 4 free GPUs for 1 h"}
    assert starts(decisions)[2].placement == {0: ("a", ("a-0", "a-1"))}


def test_best_fit_takes_the_host_with_fewest_usable_gpus_then_lowest_indexes() -> None:
    gpus = busy(gpus_of(a=4, b=4, c=4), "a-0", "b-0", "b-1", "c-1", "c-3")
    decisions = schedule(state(gpus, [job(1, "ann", any_n(2))]))
    # a has 3 free, b 2 (fits tightest), c 2 (ties with b, later by name)
    assert starts(decisions)[1].placement == {0: ("b", ("b-2", "b-3"))}


def test_best_fit_counts_what_the_job_may_use_not_what_is_idle() -> None:
    gpus = gpus_of(a=4, b=3)
    bookings = {"a-0": [book(1, "bob", 10, 100)], "a-1": [book(2, "bob", -10, 100)]}
    decisions = schedule(state(gpus, [job(1, "ann", any_n(2))], bookings))
    assert starts(decisions)[1].placement == {0: ("a", ("a-2", "a-3"))}


def test_gpus_given_earlier_in_the_pass_are_not_given_again() -> None:
    gpus = gpus_of(a=2)
    queue = [job(1, "ann", named("a-0")), job(2, "bob", any_n(2)), job(3, "cy", any_n(1))]
    decisions = schedule(state(gpus, queue))
    assert starts(decisions)[1].placement == {0: ("a", ("a-0",))}
    assert waits(decisions)[2] == "no host has 2 free GPUs for 1 h"
    assert starts(decisions)[3].placement == {0: ("a", ("a-1",))}


def test_all_tasks_start_together_or_not_at_all() -> None:
    gpus = gpus_of(a=4, b=2)
    queue = [
        job(1, "ann", any_n(4, index=0), any_n(4, index=1)),  # 4 + 4: b is too small
        job(2, "bob", any_n(2, index=0), named("a-3", index=1), Demand(2, "c")),
    ]
    decisions = schedule(state(gpus, queue))
    assert waits(decisions) == {1: "task 1: no host has 4 free GPUs for 1 h"}
    # Task 0 goes where task 1's named GPU is (the fewest hosts), not to the fuller b.
    assert starts(decisions)[2].placement == {
        0: ("a", ("a-0", "a-1")),
        1: ("a", ("a-3",)),
        2: ("c", ()),
    }


def test_a_job_that_does_not_fit_gives_back_what_its_first_tasks_took() -> None:
    queue = [job(1, "ann", any_n(4, index=0), any_n(2, index=1)), job(2, "bob", any_n(2))]
    bookings = {"b-0": [book(1, "cy", 0, 120)], "b-1": [book(2, "cy", 0, 120)]}
    decisions = schedule(state(gpus_of(a=4, b=2), queue, bookings))
    assert waits(decisions) == {1: "task 1: no host has 2 free GPUs for 1 h"}
    assert starts(decisions)[2].placement == {0: ("a", ("a-0", "a-1"))}


def test_a_task_without_gpus_needs_nothing_but_a_host() -> None:
    decisions = schedule(state(busy(gpus_of(a=1), "a-0"), [job(1, "ann", Demand(0, "a"))]))
    assert starts(decisions)[1].placement == {0: ("a", ())}
    decisions = schedule(state(gpus_of(a=1), [job(1, "ann", Demand(0, None))]))
    assert waits(decisions) == {1: "names neither a host nor GPUs"}


def test_any_n_on_a_given_host() -> None:
    gpus = gpus_of(a=4, b=2)
    decisions = schedule(state(gpus, [job(1, "ann", any_n(2, "a"))]))
    assert starts(decisions)[1].placement == {0: ("a", ("a-0", "a-1"))}


# --- examples: reservations ------------------------------------------------------------------


def test_a_reservation_of_someone_else_within_the_window_blocks() -> None:
    gpus = gpus_of(a=1)
    bookings = {"a-0": [book(9, "bob", 30, 90)]}
    decisions = schedule(state(gpus, [job(1, "ann", named("a-0"))], bookings))
    assert waits(decisions) == {
        1: "GPU a:0 is reserved by bob from 2026-11-23 12:30 UTC to 2026-11-23 13:30 UTC "
        "(1 h needed)"
    }
    # a shorter max_runtime ends before it starts
    short = job(1, "ann", named("a-0"), runtime=30 * MIN)
    assert 1 in starts(schedule(state(gpus, [short], bookings)))
    # and min_window sets the window of jobs without one
    assert 1 in starts(
        schedule(state(gpus, [job(1, "ann", named("a-0"))], bookings, min_window=20 * MIN))
    )


def test_the_owners_own_reservation_is_fine() -> None:
    gpus = gpus_of(a=2)
    bookings = {"a-0": [book(1, "ann", -10, 50), book(2, "ann", 50, 120)]}
    decisions = schedule(state(gpus, [job(1, "ann", any_n(2))], bookings))
    assert starts(decisions)[1].placement == {0: ("a", ("a-0", "a-1"))}


def test_own_reservation_then_someone_elses_blocks() -> None:
    gpus = gpus_of(a=1)
    bookings = {"a-0": [book(1, "ann", -10, 20), book(2, "bob", 20, 120)]}
    decisions = schedule(state(gpus, [job(1, "ann", any_n(1))], bookings))
    assert waits(decisions) == {1: "no host has 1 free GPUs for 1 h"}


def test_a_guest_may_use_the_reservation() -> None:
    gpus = gpus_of(a=1)
    bookings = {"a-0": [book(1, "bob", -10, 120, frozenset({"ann"}))]}
    assert 1 in starts(schedule(state(gpus, [job(1, "ann", any_n(1))], bookings)))
    assert 2 in waits(schedule(state(gpus, [job(2, "cy", any_n(1))], bookings)))


def test_a_reservation_that_ends_now_or_starts_at_the_window_end_does_not_block() -> None:
    gpus = gpus_of(a=1)
    bookings = {"a-0": [book(1, "bob", -60, 0), book(2, "bob", 60, 120)]}
    assert 1 in starts(schedule(state(gpus, [job(1, "ann", named("a-0"))], bookings)))


def test_window_boundaries_are_half_open() -> None:
    gpus = gpus_of(a=1, b=2)
    bookings = {
        "a-0": [book(1, "bob", 60, 120)],  # starts as ann's 1 h window ends
        "b-0": [book(2, "ann", -30, 30), book(3, "bob", 60, 90)],  # hers, then bob's at 1 h
        "b-1": [book(4, "ann", -30, 30), book(5, "bob", 59, 90)],  # bob's a minute early
    }
    queue = [
        job(1, "ann", named("a-0")),
        job(2, "ann", any_n(1), enqueued=1),
        job(3, "ann", any_n(1), enqueued=2),
        job(4, "cy", Demand(0, "c"), runtime=3 * H),  # a longer window looks further ahead
    ]
    decisions = schedule(state(gpus, queue, bookings))
    assert starts(decisions)[1].placement == {0: ("a", ("a-0",))}
    assert starts(decisions)[2].placement == {0: ("b", ("b-0",))}
    assert waits(decisions)[3] == "no host has 1 free GPUs for 1 h"


def test_avoid_is_respected() -> None:
    gpus = gpus_of(a=2, b=2)
    s = state(gpus, [job(1, "ann", any_n(2))], avoid={1: frozenset({"a-1"})})
    assert starts(schedule(s))[1].placement == {0: ("b", ("b-0", "b-1"))}
    s = state(gpus_of(a=3, b=4), [job(1, "ann", any_n(2))], avoid={1: frozenset({"a-0"})})
    assert starts(schedule(s))[1].placement == {0: ("a", ("a-1", "a-2"))}
    s = state(gpus, [job(1, "ann", named("a-1"))], avoid={1: frozenset({"a-1"})})
    assert waits(schedule(s)) == {1: "GPU a:1 is not available to ann (access refused)"}


# --- examples: waiting reasons ---------------------------------------------------------------


def test_waiting_reasons() -> None:
    gpus = busy(gpus_of(a=2, b=1), "a-1")
    running = [RunningJob(50, "bob", frozenset({"b-0"}), True)]
    queue = [
        job(1, "ann", named("GPU-nope")),
        job(2, "bob", named("a-1")),
        job(3, "cy", named("b-0")),
        job(4, "ann", any_n(3, "a"), enqueued=1),
        job(5, "bob", any_n(9), enqueued=1),
        job(6, "cy", any_n(2, "zz"), enqueued=1),
        job(7, "ann", named("a-0", "a-0"), enqueued=2),
        job(8, "bob", named("a-0", host="b"), enqueued=2),
        job(9, "cy", any_n(2), runtime=90 * MIN, enqueued=2),
        job(10, "ann", named("a-0"), enqueued=3),
        job(11, "bob", named("a-0"), enqueued=3),
    ]
    assert waits(schedule(state(gpus, queue, running=running))) == {
        1: "GPU GPU-nope is not known",
        2: "GPU a:1 is busy",
        3: "GPU b:0 is busy (job 50)",
        4: "host a has only 2 GPUs, 3 asked",
        5: "no host has 9 GPUs",
        6: "host zz is not known",
        7: "GPU a:0 is named twice",
        8: "GPU a:0 is not on host b",
        9: "no host has 2 free GPUs for 1 h 30 min",
        11: "GPU a:0 goes to job 10, earlier in the queue",
    }


def test_a_host_with_too_few_free_gpus_says_how_many() -> None:
    gpus = busy(gpus_of(a=4), "a-0", "a-1")
    decisions = schedule(state(gpus, [job(1, "ann", any_n(3, "a"), runtime=2 * H)]))
    assert waits(decisions) == {1: "host a has 2 of 3 GPUs free for 2 h"}
