"""Which monitor replica polls which host, and when in the interval (pure).

Rendezvous (highest-random-weight) hashing: a host goes to the replica whose hash of
(replica, host) is the highest. Every replica computes the same answer from the same list of
live replicas, without talking to the others, and when one replica joins or leaves only the
hosts it gains or held move (about 1/N of them), every other host stays where it was.

Each host also has its own phase in the interval, from a hash of its name on the wall clock:
whichever replica polls it, it is polled at the same moments, so a host that moves is polled
by the new owner at its next tick — neither early (a double poll) nor late (a gap).

A host's first poll on a replica opens its SSH connection, a handshake that costs far more CPU
than a poll: the first polls of the hosts a replica gains at once (at its start, at a takeover)
are spread so that it starts no more than so many a second (`spread_first_polls`). Each replica
also keeps connections open to the hosts it would gain if their owner left (`runner_up`:
`standby.py`), so that a takeover costs polls rather than handshakes.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable, Mapping, Sequence


def _hash64(*parts: str) -> int:
    digest = hashlib.blake2b("\0".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def owner(host: str, replicas: Sequence[str]) -> str | None:
    """The replica of `replicas` that polls `host` (None when there is none)."""
    best: str | None = None
    best_weight = -1
    for replica in replicas:
        weight = _hash64(replica, host)
        if weight > best_weight or (weight == best_weight and best is not None and replica < best):
            best, best_weight = replica, weight
    return best


def runner_up(host: str, replicas: Sequence[str]) -> str | None:
    """The replica that would poll `host` if its owner left (None with fewer than two)."""
    first = owner(host, replicas)
    return owner(host, [replica for replica in replicas if replica != first])


def assign(hosts: Iterable[str], replicas: Sequence[str]) -> dict[str, set[str]]:
    """Every replica's hosts (each host in exactly one set; none when `replicas` is empty)."""
    shares: dict[str, set[str]] = {replica: set() for replica in replicas}
    for host in hosts:
        found = owner(host, replicas)
        if found is not None:
            shares[found].add(host)
    return shares


def phase(host: str, interval_s: float) -> float:
    """Seconds into each interval (of the wall clock) at which `host` is polled."""
    return _hash64("phase", host) / 2**64 * interval_s


def next_tick(host: str, interval_s: float, after: float) -> float:
    """The first of `host`'s ticks (wall-clock seconds) at or after `after`."""
    offset = phase(host, interval_s)
    k = math.ceil((after - offset) / interval_s)
    return k * interval_s + offset


def spread_first_polls(due: Mapping[str, float], per_s: float) -> dict[str, float]:
    """When to poll each host first: at its `due` time or later, and at least `1 / per_s`
    seconds after the host before it (in order of due time, then name), so that no more than
    `per_s` first polls, each with its SSH handshake, start in a second."""
    gap = 1.0 / per_s
    found: dict[str, float] = {}
    last = -math.inf
    for name, at in sorted(due.items(), key=lambda item: (item[1], item[0])):
        last = max(at, last + gap)
        found[name] = last
    return found
