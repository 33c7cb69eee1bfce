"""The monitor's host assignment (rendezvous hashing) and host phases: pure rules."""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.monitor.shards import (
    assign,
    next_tick,
    owner,
    phase,
    runner_up,
    spread_first_polls,
)

HOSTS = [f"gpu{i:04d}" for i in range(2000)]
REPLICAS = ["monitor@a:1-aaaaaa", "monitor@b:2-bbbbbb", "monitor@c:3-cccccc"]


def test_every_host_has_exactly_one_owner() -> None:
    shares = assign(HOSTS, REPLICAS)
    assert sorted(h for share in shares.values() for h in share) == sorted(HOSTS)
    assert all(owner(h, REPLICAS) in shares and h in shares[owner(h, REPLICAS)] for h in HOSTS)


def test_no_replica_no_owner_and_one_replica_owns_all() -> None:
    assert owner("gpu1", []) is None
    assert assign(HOSTS, []) == {}
    assert assign(HOSTS, REPLICAS[:1]) == {REPLICAS[0]: set(HOSTS)}


def test_the_runner_up_is_who_owns_a_host_once_its_owner_left() -> None:
    for host in HOSTS[:300]:
        first = owner(host, REPLICAS)
        left = [r for r in REPLICAS if r != first]
        assert runner_up(host, REPLICAS) == owner(host, left) != first
    assert runner_up("gpu1", REPLICAS[:1]) is None
    assert runner_up("gpu1", []) is None
    # With two replicas each is the runner-up of every host of the other.
    pair = REPLICAS[:2]
    assert all({owner(h, pair), runner_up(h, pair)} == set(pair) for h in HOSTS)


def test_balance_over_two_and_three_replicas() -> None:
    for replicas in (REPLICAS[:2], REPLICAS):
        fair = len(HOSTS) / len(replicas)
        for share in assign(HOSTS, replicas).values():
            assert abs(len(share) - fair) < 0.1 * fair, (len(share), fair)


def test_the_order_replicas_are_listed_in_does_not_matter() -> None:
    assert assign(HOSTS, REPLICAS) == assign(HOSTS, list(reversed(REPLICAS)))


def test_a_joining_replica_takes_only_hosts_and_about_its_share() -> None:
    before = assign(HOSTS, REPLICAS[:2])
    after = assign(HOSTS, REPLICAS)
    moved = [h for h in HOSTS if owner(h, REPLICAS[:2]) != owner(h, REPLICAS)]
    # Every host that moved went to the newcomer; nothing moved between the old two.
    assert set(moved) == after[REPLICAS[2]]
    for old in REPLICAS[:2]:
        assert after[old] <= before[old]
    assert abs(len(moved) - len(HOSTS) / 3) < 0.1 * len(HOSTS) / 3


def test_a_leaving_replica_gives_only_its_own_hosts_away() -> None:
    before = assign(HOSTS, REPLICAS)
    after = assign(HOSTS, REPLICAS[1:])
    gone = REPLICAS[0]
    for replica in REPLICAS[1:]:
        assert before[replica] <= after[replica]
        assert after[replica] - before[replica] <= before[gone]
    # Its hosts are split between the others, not all given to one.
    assert all(after[r] - before[r] for r in REPLICAS[1:])


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.text(min_size=1, max_size=20), min_size=1, max_size=6, unique=True),
    st.lists(st.text(min_size=1, max_size=20), max_size=30, unique=True),
)
def test_minimal_movement_for_any_names(replicas: list[str], hosts: list[str]) -> None:
    for gone in replicas:
        rest = [r for r in replicas if r != gone]
        for host in hosts:
            if owner(host, replicas) != gone:
                assert owner(host, rest) == owner(host, replicas)


def test_phases_spread_over_the_interval_and_ticks_are_on_them() -> None:
    phases = [phase(h, 5.0) for h in HOSTS]
    assert all(0 <= p < 5.0 for p in phases)
    per_second = [sum(1 for p in phases if s <= p < s + 1) for s in range(5)]
    assert min(per_second) > 0.8 * len(HOSTS) / 5
    for host in HOSTS[:50]:
        tick = next_tick(host, 5.0, 1_700_000_000.3)
        assert 1_700_000_000.3 <= tick < 1_700_000_005.3
        assert abs((tick - phase(host, 5.0)) / 5.0 - round((tick - phase(host, 5.0)) / 5.0)) < 1e-6
        # The same tick from anywhere before it: two replicas agree on it.
        assert next_tick(host, 5.0, tick - 4.9) == tick
        assert next_tick(host, 5.0, tick) == tick


def test_hosts_gained_at_once_get_their_first_polls_spread_at_the_rate() -> None:
    """A replica's share of 2,000 hosts, all stale at a takeover: 300 handshakes a second."""
    orphans = {host: 100.0 for host in HOSTS[:1000]}
    first = spread_first_polls(orphans, per_s=300)
    times = sorted(first.values())
    assert set(first) == set(orphans) and times[0] == 100.0
    assert all(later - earlier >= 1 / 300 - 1e-9 for earlier, later in itertools.pairwise(times))
    assert times[-1] == pytest.approx(100.0 + 999 / 300)  # none later than the rate needs


def test_first_polls_already_apart_stay_on_their_ticks() -> None:
    due = {host: phase(host, 5.0) for host in HOSTS[:10]}
    assert spread_first_polls(due, per_s=1000) == due  # 10 over 5 s: none closer than 1 ms


@settings(max_examples=200)
@given(
    st.dictionaries(st.text(min_size=1, max_size=8), st.floats(0, 100), max_size=60),
    st.floats(0.5, 1000),
)
def test_no_first_poll_is_early_and_none_closer_than_the_rate_allows(
    due: dict[str, float], per_s: float
) -> None:
    first = spread_first_polls(due, per_s)
    assert set(first) == set(due)
    assert all(first[host] >= due[host] for host in due)
    times = sorted(first.values())
    assert all(b - a >= 1 / per_s - 1e-9 for a, b in itertools.pairwise(times))
