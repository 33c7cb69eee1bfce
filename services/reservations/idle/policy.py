"""Idle reservations given back (pure): which policy applies, the idle state machine, the links.

A running reservation whose GPUs ALL stay under the policy's utilisation and memory thresholds
for `for_minutes` is idle: its owner is told once, with an "I still need it" and a "release
now" link. With no answer for `grace_minutes` after that notice, the rest of the reservation is
released. "I still need it" snoozes the policy for `snooze_minutes`. A busy sample at any time
starts over (a notice pending is forgotten): work is never taken away from someone using it.

Nothing is released without a notice that went out and a grace that passed, and nothing happens
on stale figures (the monitor lost the host): no sample for `stale_after`, no action.

Links carry a token signed with HMAC-SHA256 (the `[auth] jwt_secret`): the reservation and the
notice's number. It is single-use (the state row records the notice whose link was used) and
expires with its notice's grace. The same notice always signs the same token, so a notice sent
again after a crash carries links that work.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Literal

from services.reservations.rules.domain import IdlePolicy

Action = Literal["notify", "release"]
Figures = Sequence[tuple[float | None, float | None]]  # (utilisation %, memory MiB) per GPU

# Example values shown in the docs (docs/admins/idle-reservations.md) and the rule editor.
EXAMPLE = IdlePolicy(
    below_util_percent=5.0,
    below_memory_mib=1024.0,
    for_minutes=60.0,
    grace_minutes=30.0,
    snooze_minutes=120.0,
)


def policy_problems(policy: IdlePolicy) -> dict[str, str]:
    problems: dict[str, str] = {}
    if not 0 < policy.below_util_percent <= 100:
        problems["idle_policy.below_util_percent"] = "must be more than 0 and at most 100"
    if not policy.below_memory_mib > 0:
        problems["idle_policy.below_memory_mib"] = "must be more than 0"
    for name in ("for_minutes", "grace_minutes", "snooze_minutes"):
        if not getattr(policy, name) > 0:
            problems[f"idle_policy.{name}"] = "must be more than 0"
    return problems


def most_lenient(policies: Iterable[IdlePolicy | None]) -> IdlePolicy | None:
    """The policy of a reservation, from the rules granting it: rules without one do not count;
    of several, the one that waits longest before a release (for + grace) decides, then the
    longer snooze: when rules disagree, the owner gets the benefit of the doubt."""
    found = [p for p in policies if p is not None]
    if not found:
        return None
    return max(found, key=lambda p: (p.for_minutes + p.grace_minutes, p.snooze_minutes))


@dataclass(frozen=True)
class IdleState:
    """What is remembered of one reservation (persisted, except `seen_at`)."""

    since: datetime | None = None  # first sample of the current idle streak
    notified_at: datetime | None = None  # the notice of this streak went out (None: not yet)
    snoozed_until: datetime | None = None  # "I still need it" until then
    notices: int = 0  # notices sent so far (the number a link signs)
    seen_at: datetime | None = None  # the newest sample (in memory only)


def quiet(policy: IdlePolicy, figures: Figures) -> bool:
    """Every GPU reported and under both thresholds (an unreported figure is not idle)."""
    if not figures:
        return False
    return all(
        util is not None
        and memory is not None
        and util < policy.below_util_percent
        and memory < policy.below_memory_mib
        for util, memory in figures
    )


def observe(state: IdleState, policy: IdlePolicy, figures: Figures, at: datetime) -> IdleState:
    """The state after one sample of the reservation's GPUs taken at `at`."""
    if state.seen_at is not None and at <= state.seen_at:
        return state  # late or repeated: the newer one already counted
    seen = replace(state, seen_at=at)
    if state.snoozed_until is not None and at < state.snoozed_until:
        return replace(seen, since=None)
    if not quiet(policy, figures):
        return replace(seen, since=None, notified_at=None)  # busy: start over
    return seen if state.since is not None else replace(seen, since=at)


def decide(
    state: IdleState, policy: IdlePolicy, now: datetime, stale_after: timedelta
) -> Action | None:
    """What is due now: the notice, the release, or nothing."""
    if state.seen_at is None or now - state.seen_at > stale_after:
        return None  # no fresh figures: never act on what we cannot see
    if state.since is None:
        return None
    if state.notified_at is not None:
        due = state.notified_at + timedelta(minutes=policy.grace_minutes)
        return "release" if now >= due else None
    if state.snoozed_until is not None and now < state.snoozed_until:
        return None
    return "notify" if now - state.since >= timedelta(minutes=policy.for_minutes) else None


def notified(state: IdleState, now: datetime) -> IdleState:
    return replace(state, notified_at=now, notices=state.notices + 1)


def kept(state: IdleState, policy: IdlePolicy, now: datetime) -> IdleState:
    """ "I still need it": no notice until the snooze ends; the idle streak starts over."""
    until = now + timedelta(minutes=policy.snooze_minutes)
    return replace(state, since=None, notified_at=None, snoozed_until=until)


# --- links ------------------------------------------------------------------------------------


def _signature(secret: str, reservation_id: int, notice: int) -> str:
    message = f"warden idle link:{reservation_id}:{notice}".encode()
    return hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()[:32]


def link_token(secret: str, reservation_id: int, notice: int) -> str:
    return f"{reservation_id}.{notice}.{_signature(secret, reservation_id, notice)}"


def read_token(secret: str, token: str) -> tuple[int, int] | None:
    """(reservation id, notice) of a token this secret signed, or None."""
    parts = token.split(".")
    if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
        return None
    if len(parts[0]) > 12 or len(parts[1]) > 9:
        return None
    reservation_id, notice = int(parts[0]), int(parts[1])
    if not hmac.compare_digest(parts[2], _signature(secret, reservation_id, notice)):
        return None
    return reservation_id, notice
