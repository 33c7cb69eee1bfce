"""`[queue]`: the order of the jobs queue (fair share or FIFO) and its predicted starts
(services/jobs/queue/fairshare.py and forecast.py)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.shared.config.declare import option, parsed

_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class GroupWeight:
    """A group's weight in the fair share (1 when none is given)."""

    group: str
    weight: float


def parse_group_weight(text: str) -> GroupWeight:
    """`"vision = 2"`."""
    group, equals, weight = text.partition("=")
    group = group.strip()
    if not equals or not _GROUP.fullmatch(group):
        raise ValueError(f'{text!r}: write it as "<group> = <weight>"')
    try:
        value = float(weight)
    except ValueError:
        raise ValueError(f"{text!r}: the weight is not a number") from None
    if not 0 < value <= 1000:
        raise ValueError(f"{text!r}: the weight must be over 0 and at most 1000")
    return GroupWeight(group, value)


@dataclass(frozen=True)
class QueueSettings:
    """The jobs queue: in which order waiting jobs get GPUs, and their predicted starts."""

    policy: str = option(
        "fair",
        "fair: users with less recent GPU usage against their share go first (age breaks "
        "ties); fifo: first queued, first served.",
        choices=("fair", "fifo"),
    )
    half_life_h: float = option(
        168.0,
        "Fair share: an hour of GPU use (jobs and reservations) this many hours ago counts "
        "half as much as one now.",
        min=1,
        max=24 * 365,
    )
    weights: tuple[GroupWeight, ...] = parsed(
        (),
        parse_group_weight,
        'Fair share: group weights as "<group> = <weight>"; a user\'s share is the largest '
        "weight of their groups (1 when none is listed), shares are equal by default.",
    )
    starve_after_h: float = option(
        72.0,
        "A job waiting this many hours goes before every job that has not waited as long, "
        "whatever its owner's usage; 0: no such bound (usage still decays while one waits).",
        min=0,
    )
    forecast_horizon_h: float = option(
        168.0,
        "How far ahead predicted starts look; a job that would not start within it has none.",
        min=1,
        max=24 * 90,
    )
