"""The idle state machine (pure): busy stays, idle → notify, keep → snooze, no answer →
release, restart, stale figures, and the signed links."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from services.reservations.idle.policy import (
    IdleState,
    decide,
    kept,
    link_token,
    most_lenient,
    notified,
    observe,
    policy_problems,
    read_token,
)
from services.reservations.rules.access import idle_policy_of
from services.reservations.rules.domain import AccessRule, Gpu, IdlePolicy, Member
from services.shared.http_errors import loggable_path

POLICY = IdlePolicy(
    below_util_percent=5,
    below_memory_mib=1024,
    for_minutes=60,
    grace_minutes=30,
    snooze_minutes=120,
)
T0 = datetime(2026, 11, 24, 9, 0, tzinfo=UTC)
STALE = timedelta(minutes=1)
IDLE = [(0.0, 100.0), (2.0, 500.0)]
BUSY_UTIL = [(0.0, 100.0), (80.0, 500.0)]
BUSY_MEMORY = [(0.0, 100.0), (1.0, 30_000.0)]


def run(
    state: IdleState, figures: list[tuple[float | None, float | None]], minutes: range
) -> IdleState:
    for minute in minutes:
        state = observe(state, POLICY, figures, T0 + timedelta(minutes=minute))
    return state


def at(minutes: float) -> datetime:
    return T0 + timedelta(minutes=minutes)


def test_a_busy_reservation_is_never_told_or_released() -> None:
    for busy in (BUSY_UTIL, BUSY_MEMORY, [(None, 10.0)], []):
        state = run(IdleState(), busy, range(0, 300))
        assert state.since is None
        assert decide(state, POLICY, at(299), STALE) is None


def test_idle_for_the_policys_minutes_is_told_once_then_released_after_the_grace() -> None:
    state = run(IdleState(), IDLE, range(0, 60))
    assert state.since == T0
    assert decide(state, POLICY, at(59), STALE) is None
    state = observe(state, POLICY, IDLE, at(60))
    assert decide(state, POLICY, at(60), STALE) == "notify"
    state = notified(state, at(60))
    assert state.notices == 1
    state = run(state, IDLE, range(61, 90))
    assert decide(state, POLICY, at(89), STALE) is None  # told, still in the grace
    state = observe(state, POLICY, IDLE, at(90))
    assert decide(state, POLICY, at(90), STALE) == "release"


def test_work_resuming_during_the_grace_cancels_the_notice() -> None:
    state = notified(run(IdleState(), IDLE, range(0, 61)), at(60))
    state = observe(state, POLICY, BUSY_UTIL, at(70))
    assert state.notified_at is None and state.since is None
    state = run(state, IDLE, range(71, 100))
    assert decide(state, POLICY, at(99), STALE) is None  # a fresh streak of 28 minutes


def test_keep_snoozes_the_policy_then_it_counts_again() -> None:
    state = notified(run(IdleState(), IDLE, range(0, 61)), at(60))
    state = kept(state, POLICY, at(65))
    assert state.snoozed_until == at(185)
    state = run(state, IDLE, range(66, 185))
    assert state.since is None
    assert decide(state, POLICY, at(184), STALE) is None
    state = run(state, IDLE, range(185, 245))
    assert state.since == at(185)
    assert decide(state, POLICY, at(244), STALE) is None
    state = observe(state, POLICY, IDLE, at(245))
    assert decide(state, POLICY, at(245), STALE) == "notify"
    assert notified(state, at(245)).notices == 2  # a new notice: new links


def test_a_restart_keeps_what_was_stored_and_acts_only_on_fresh_figures() -> None:
    told = notified(run(IdleState(), IDLE, range(0, 61)), at(60))
    restarted = replace(told, seen_at=None)  # seen_at lives in memory only
    assert decide(restarted, POLICY, at(95), STALE) is None  # nothing seen since the restart
    assert decide(restarted, POLICY, at(61), STALE) is None  # and never a second notice
    fresh = observe(restarted, POLICY, IDLE, at(95))
    assert decide(fresh, POLICY, at(95), STALE) == "release"  # the release is not skipped


def test_stale_figures_never_release() -> None:
    told = notified(run(IdleState(), IDLE, range(0, 61)), at(60))
    assert decide(told, POLICY, at(120), STALE) is None


def test_late_samples_do_not_count_twice() -> None:
    state = run(IdleState(), IDLE, range(0, 10))
    assert observe(state, POLICY, BUSY_UTIL, at(5)) == state


def test_policies_must_be_positive() -> None:
    assert policy_problems(POLICY) == {}
    bad = replace(POLICY, below_util_percent=0, grace_minutes=-1)
    assert set(policy_problems(bad)) == {
        "idle_policy.below_util_percent",
        "idle_policy.grace_minutes",
    }


def test_of_several_rules_the_most_lenient_policy_applies() -> None:
    strict = replace(POLICY, for_minutes=10, grace_minutes=5)
    assert most_lenient([None, strict, POLICY]) == POLICY
    assert most_lenient([None]) is None
    gpu = Gpu("GPU-1", "node1", 0)
    member = Member("ann", frozenset({"students"}))
    rules = [
        AccessRule(
            1, "all", valid_from=T0 - timedelta(days=1), users=frozenset({"ann"}), all_gpus=True
        ),
        AccessRule(
            2,
            "students",
            valid_from=T0 - timedelta(days=1),
            groups=frozenset({"students"}),
            hosts=frozenset({"node1"}),
            idle_policy=strict,
        ),
        AccessRule(
            3,
            "others",
            valid_from=T0 - timedelta(days=1),
            users=frozenset({"bob"}),
            all_gpus=True,
            idle_policy=POLICY,
        ),
        AccessRule(
            4,
            "later",
            valid_from=T0 + timedelta(days=1),
            users=frozenset({"ann"}),
            all_gpus=True,
            idle_policy=POLICY,
        ),
    ]
    known = {gpu.uuid: gpu}
    assert idle_policy_of(rules, member, ["GPU-1"], known, T0) == strict
    assert idle_policy_of(rules, member, ["GPU-1"], known, T0 + timedelta(days=2)) == POLICY
    assert idle_policy_of(rules[:1], member, ["GPU-1"], known, T0) is None


def test_links_are_signed_and_bound_to_their_notice() -> None:
    token = link_token("s" * 32, 12, 3)
    assert read_token("s" * 32, token) == (12, 3)
    assert read_token("t" * 32, token) is None
    forged = token.replace("12.3.", "13.3.", 1)
    assert read_token("s" * 32, forged) is None
    for junk in ("", "a.b.c", "12.3", "12.3.x.y", "-1.3." + token.split(".")[2]):
        assert read_token("s" * 32, junk) is None


def test_a_links_token_is_masked_in_logged_paths() -> None:
    token = link_token("s" * 32, 12, 3)
    assert loggable_path(f"/api/v1/idle/links/{token}") == "/api/v1/idle/links/***"
    assert loggable_path("/api/v1/idle/stats") == "/api/v1/idle/stats"
