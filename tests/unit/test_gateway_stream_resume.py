"""Resuming the live stream on another gateway replica (services.gateway.stream, pure: a fake
clock and bus). Replicas receive the same events in different orders; a client that saw one
replica's events up to X and resumes on another gets every event it missed (some again, which it
drops by `event_id`), or one reset when that replica cannot vouch for it. Never a silent gap."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass, field
from datetime import UTC, datetime

from hypothesis import given, settings
from hypothesis import strategies as st

from services.gateway.stream import StreamHub, parse_id
from services.shared.contracts import Envelope

WINDOW_S = 5.0
MAX_LAG_S = WINDOW_S / 2 * 0.99  # the assumption: no replica receives an event later


EPOCHS = itertools.count(1)


@dataclass
class FakeBus:
    reconnections: int = 0


@dataclass
class Clock:
    now: float = 1000.0

    def __call__(self) -> float:
        return self.now


@dataclass
class Replica:
    clock: Clock = field(default_factory=Clock)
    bus: FakeBus = field(default_factory=FakeBus)
    hub: StreamHub = field(init=False)

    def __post_init__(self) -> None:
        self.hub = StreamHub(
            self.bus,  # type: ignore[arg-type]
            replay=10_000,
            resume_window_s=WINDOW_S,
            resume_wait_s=0,
            epoch=lambda: f"{next(EPOCHS):08x}",  # never the same twice, as secrets' are
            clock=self.clock,
            wall=self.clock,  # one clock: "now" is a Unix time in these tests
        )

    def receive(self, envelope: Envelope, at: float) -> str | None:
        self.clock.now = at
        event = self.hub.publish("reservations", envelope)
        return None if event is None else event.id


def envelope(n: int, source: str = "reservations", at: float | None = None) -> Envelope:
    """Event n, occurred at Unix time `at` (default: after the fake clocks' times: never late)."""
    occurred = (
        "2026-11-24T20:00:00+00:00" if at is None else datetime.fromtimestamp(at, UTC).isoformat()
    )
    return Envelope(f"evt-{n:04d}", "reservation.updated", 1, occurred, source, {"n": n})


def missed_ids(hub: StreamHub, last_id: str) -> set[str] | None:
    found = hub.missed(last_id)
    return None if found is None else {event.event_id for event in found}


def test_the_same_replica_resumes_exactly_after_the_last_seq() -> None:
    a = Replica()
    ids = [a.receive(envelope(n), 1000 + n) for n in range(5)]
    assert ids[1] is not None
    assert missed_ids(a.hub, ids[1]) == {"evt-0002", "evt-0003", "evt-0004"}
    assert [e.seq for e in a.hub.missed(ids[1]) or []] == [3, 4, 5]


def test_another_replica_resends_the_window_before_the_event_and_all_after() -> None:
    a, b = Replica(Clock(0.0)), Replica(Clock(0.0))
    for n in range(20):
        a.receive(envelope(n), 1000 + n)
        b.receive(envelope(n), 1000 + n)
    last = a.hub.missed("")  # nothing: a fresh client
    assert last == []
    seen = f"{a.hub.epoch}-11-evt-0010"  # the client saw a's events up to evt-0010
    again = missed_ids(b.hub, seen)
    # 5 s before evt-0010 arrived at b (1005..1009) again, and everything after it.
    assert again == {f"evt-{n:04d}" for n in (*range(5, 10), *range(11, 20))}


def test_a_replica_that_does_not_have_the_event_says_reset() -> None:
    a, b = Replica(), Replica()
    last = a.receive(envelope(1), 1000)
    assert last is not None and parse_id(last)[2] == "evt-0001"
    b.receive(envelope(2), 1000)
    assert b.hub.missed(last) is None
    assert b.hub.missed("ffffffff-3") is None  # an id of an older release: no event in it
    assert b.hub.missed(f"{a.hub.epoch}-1-") is None


def test_a_buffer_that_does_not_reach_back_the_window_says_reset() -> None:
    a, b = Replica(Clock(0.0)), Replica(Clock(0.0))
    b.hub.replay = 3
    for n in range(10):
        a.receive(envelope(n), 1000 + n)
        b.receive(envelope(n), 1000 + n)
    # b keeps evt-0007..9; evt-0008 arrived at 1008, its window from 1003 is gone from b.
    assert b.hub.missed(f"{a.hub.epoch}-9-evt-0008") is None


def test_a_buffer_younger_than_the_window_says_reset() -> None:
    b = Replica(Clock(1000.0))
    # b started at 1000 (its subscriptions then): an event of 1002 can be resumed only with
    # what arrived from 997 on, which b never had.
    b.receive(envelope(1), 1002)
    assert b.hub.missed("aaaaaaaa-1-evt-0001") is None
    b.receive(envelope(2), 1006)
    assert missed_ids(b.hub, "aaaaaaaa-2-evt-0002") == {"evt-0001"}


def test_a_duplicate_envelope_is_streamed_once() -> None:
    a = Replica()
    assert a.receive(envelope(1), 1000) is not None
    assert a.receive(envelope(1), 1001) is None  # an outbox published twice
    assert len(a.hub.missed(f"{a.hub.epoch}-0-") or []) == 1


def test_after_a_broker_reconnection_every_resume_is_a_reset() -> None:
    a = Replica(Clock(900.0))
    a.receive(envelope(1), 1000)
    last = a.receive(envelope(2), 1001)
    assert last is not None
    a.bus.reconnections += 1  # its transient queues were gone a while: events were lost
    assert a.hub.missed(last) is None
    a.receive(envelope(3), 1010)
    assert a.hub.missed(last) is None
    assert parse_id(a.hub._position())[0] != parse_id(last)[0]


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.floats(0, 30),  # when it was published
            st.sampled_from(["reservations", "jobs", "violations"]),
            st.floats(0, MAX_LAG_S),  # how late replica a got it
            st.floats(0, MAX_LAG_S),  # how late replica b got it
        ),
        min_size=1,
        max_size=40,
    ),
    st.data(),
)
def test_what_the_client_missed_is_resent_or_arrives_live(events, data) -> None:  # type: ignore[no-untyped-def]
    a, b = Replica(Clock(0.0)), Replica(Clock(0.0))  # both subscribed long before
    published = [
        (envelope(n, source, 1000 + when), 1000 + when, 1000 + when + lag_a, 1000 + when + lag_b)
        for n, (when, source, lag_a, lag_b) in enumerate(events)
    ]
    order_a = sorted(published, key=lambda e: e[2])
    order_b = sorted(published, key=lambda e: e[3])
    ids_a = [a.receive(env, at) for env, _, at, _ in order_a]
    # The client saw a's events up to the k-th, then resumed on b at some moment after b got it.
    k = data.draw(st.integers(0, len(order_a) - 1))
    seen = {env.id for env, _, _, _ in order_a[: k + 1]}
    last_seen, last_id = order_a[k][0], ids_a[k]
    assert last_id is not None
    arrived_b = sorted(r_b for env, _, _, r_b in order_b)
    got_x_at = next(r_b for env, _, _, r_b in order_b if env.id == last_seen.id)
    resume_at = data.draw(st.sampled_from([t for t in arrived_b if t >= got_x_at]))
    for env, _, _, r_b in order_b:
        if r_b <= resume_at:
            b.receive(env, r_b)
    resent = missed_ids(b.hub, last_id)
    assert resent is not None  # b had the whole window: it vouches for the resume
    live = {env.id for env, _, _, r_b in order_b if r_b > resume_at}
    missed = {env.id for env, _, _, _ in published} - seen
    assert missed <= resent | live


def test_an_event_that_came_late_here_is_no_place_to_resume_from() -> None:
    a, b = Replica(Clock(0.0)), Replica(Clock(0.0))
    for n in range(10):
        a.receive(envelope(n, at=1000 + n), 1000 + n)
    last = a.receive(envelope(10, at=1010), 1010.1)
    assert last is not None and parse_id(last)[2] == "evt-0010"
    for n in range(10):
        b.receive(envelope(n, at=1000 + n), 1000 + n)
    b.receive(envelope(10, at=1010), 1010 + WINDOW_S)  # b's queue was behind: what else is?
    assert b.hub.missed(last) is None


def test_a_replica_that_received_events_late_names_none_in_its_ids_for_a_window() -> None:
    a = Replica(Clock(0.0))
    on_time = a.receive(envelope(1, at=1000), 1000.1)
    late = a.receive(envelope(2, at=1001), 1001 + WINDOW_S)  # one of its queues fell behind
    after = a.receive(envelope(3, at=1007), 1007.1)
    assert on_time is not None and parse_id(on_time)[2] == "evt-0001"
    assert late is not None and parse_id(late)[2] == ""  # elsewhere: a reset
    assert after is not None and parse_id(after)[2] == ""
    again = a.receive(envelope(4, at=1020), 1020.1)  # a window later: it vouches again
    assert again is not None and parse_id(again)[2] == "evt-0004"
    assert a.hub.missed(late) is not None  # its own ids still resume exactly here


async def test_a_resume_waits_a_moment_for_its_last_event_to_arrive_here() -> None:
    b = Replica(Clock(0.0))
    b.hub.resume_wait_s = 30.0
    waiting = asyncio.create_task(b.hub._arrival("aaaaaaaa-1-evt-0003"))
    await asyncio.sleep(0)
    assert not waiting.done()  # the other replica got evt-0003 first
    b.receive(envelope(3), 1000.0)
    await asyncio.wait_for(waiting, 5)
    assert missed_ids(b.hub, "aaaaaaaa-1-evt-0003") == set()
    b.hub.resume_wait_s = 0.01
    await b.hub._arrival("aaaaaaaa-9-evt-0099")  # never comes: gives up, and it is a reset
    assert b.hub.missed("aaaaaaaa-9-evt-0099") is None
    assert b.hub._awaited == {}
