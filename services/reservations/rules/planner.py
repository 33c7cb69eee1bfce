"""Planning views over many GPUs and weeks (pure): the overview grid and the earliest slot.

Both are called for a whole fleet over weeks, so they work on interval boundaries (slot index
arithmetic, bisect) and never step through time slot by slot.
"""

from __future__ import annotations

import heapq
from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import groupby
from operator import attrgetter
from typing import Any

from services.reservations.rules.domain import Booking, Gpu, Interval
from services.reservations.rules.intervals import merge
from services.shared.topology import PACK, Topology, choose_gpus

MINE = "mine"
TAKEN = "taken"
NOT_ALLOWED = "not_allowed"
FREE = "free"

_END = attrgetter("end")
_UNKNOWN = datetime.min.replace(tzinfo=UTC)  # before any t: not worked out yet


# --- overview ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """Slots first .. first + count - 1 of one GPU, all in one state."""

    first: int
    count: int
    state: str  # mine | taken | not_allowed | free
    owner: str | None = None  # taken: whose
    reservation_id: int | None = None  # taken: which (the earliest-starting one)

    def to_dict(self) -> dict[str, Any]:
        return {
            "first": self.first,
            "count": self.count,
            "state": self.state,
            "owner": self.owner,
            "reservation_id": self.reservation_id,
        }


_Label = tuple[str, str | None, int | None]  # (state, owner, reservation_id)
_MINE: _Label = (MINE, None, None)
_FREE: _Label = (FREE, None, None)
_NOT_ALLOWED: _Label = (NOT_ALLOWED, None, None)
# What an event at a slot index does (all of one index apply before its slot is labelled).
# Each "off" is its "on" + 1.
_ALLOWED_ON, _ALLOWED_OFF, _MINE_ON, _MINE_OFF, _TAKEN_ON, _TAKEN_OFF, _NOTHING = range(7)
_Event = tuple[int, int, int]  # (slot index, what, rank of a taken booking)
_BY_START_ID = attrgetter("start", "id")


def overview_runs(
    me: str,
    allowed: Sequence[Interval],
    bookings: Sequence[Booking],
    start: datetime,
    slot: timedelta,
    slots: int,
) -> list[Run]:
    """The states of slots 0 .. slots - 1 of one GPU (slot i is [start + i*slot, +slot)).

    mine (a booking of `me` overlaps the slot) > taken (someone else's does; the one that
    starts first names it) > not_allowed (the slot is not wholly in `allowed` time) > free.
    Equal neighbours form one Run; the runs cover exactly `slots` slots, in order.
    """
    return _Overview(me, start, slot, slots, share=False).runs(allowed, bookings)


def overview_by_gpu(
    me: str,
    allowed: Mapping[str, Sequence[Interval]],
    bookings: Mapping[str, Sequence[Booking]],
    start: datetime,
    slot: timedelta,
    slots: int,
) -> dict[str, list[Run]]:
    """overview_runs for every GPU in `allowed` (uuid -> intervals; bookings by uuid too).

    GPUs that share one allowed list (as `access.allowed_by_gpu` returns them) share its
    work, and equal runs are one object, so a fleet costs much less than its GPUs one by one.
    GPUs without bookings may share one list of runs: do not mutate the lists.
    """
    overview = _Overview(me, start, slot, slots)
    return {uuid: overview.runs(spans, bookings.get(uuid, ())) for uuid, spans in allowed.items()}


class _Overview:
    """One overview grid: caches what GPUs have in common (allowed events, Run objects)."""

    def __init__(
        self, me: str, start: datetime, slot: timedelta, slots: int, share: bool = True
    ) -> None:
        if slot <= timedelta(0):
            raise ValueError("slot must be longer than zero")
        self.me, self.start, self.slot, self.slots = me, start, slot, max(slots, 0)
        # By id() of an allowed list, holding the list so that the id stays its own.
        self._allowed: dict[int, tuple[Sequence[Interval], list[_Event]]] = {}
        self._idle: dict[int, list[Run]] = {}  # the runs of an allowed list without bookings
        self._share = share  # one Run object for equal runs: pays off over many GPUs
        self._runs: dict[tuple[int, int, _Label], Run] = {}

    def runs(self, allowed: Sequence[Interval], bookings: Sequence[Booking]) -> list[Run]:
        if self.slots == 0:
            return []
        allowed_events = self._allowed_events(allowed)
        if not bookings:
            idle = self._idle.get(id(allowed))
            if idle is None:
                idle = self._idle[id(allowed)] = self._to_runs(
                    _cuts(allowed_events, [], self.slots)
                )
            return idle
        # Others' bookings by rank: the lowest rank among those in a slot starts first.
        others = sorted((b for b in bookings if b.owner != self.me), key=_BY_START_ID)
        events = list(allowed_events)
        for rank, booking in enumerate(others):
            self._add_booking(events, booking, _TAKEN_ON, rank)
        for booking in bookings:
            if booking.owner == self.me:
                self._add_booking(events, booking, _MINE_ON, 0)
        events.sort()
        labels = [(TAKEN, b.owner, b.id) for b in others]
        return self._to_runs(_cuts(events, labels, self.slots))

    def _allowed_events(self, allowed: Sequence[Interval]) -> list[_Event]:
        known = self._allowed.get(id(allowed))
        if known is None:
            events: list[_Event] = [(0, _NOTHING, 0)]
            for interval in merge(allowed):  # only slots wholly inside allowed time count
                first = max(-((self.start - interval.start) // self.slot), 0)  # ceil
                stop = (interval.end - self.start) // self.slot  # floor
                if first < stop:
                    events += [(first, _ALLOWED_ON, 0), (stop, _ALLOWED_OFF, 0)]
            known = self._allowed[id(allowed)] = (allowed, sorted(events))
        return known[1]

    def _add_booking(self, events: list[_Event], booking: Booking, on: int, rank: int) -> None:
        """A booking marks every slot it overlaps: floor of its start to ceil of its end."""
        if booking.end <= booking.start:
            return
        first = max((booking.start - self.start) // self.slot, 0)  # earlier: from slot 0
        stop = -((self.start - booking.end) // self.slot)
        if first < stop:
            events += [(first, on, rank), (stop, on + 1, rank)]

    def _to_runs(self, cuts: list[tuple[int, _Label]]) -> list[Run]:
        stops = [first for first, _ in cuts[1:]] + [self.slots]
        if not self._share:
            return [
                Run(first, stop - first, *label)
                for (first, label), stop in zip(cuts, stops, strict=True)
            ]
        runs: list[Run] = []
        for (first, label), stop in zip(cuts, stops, strict=True):
            key = (first, stop, label)
            run = self._runs.get(key)
            if run is None:
                run = self._runs[key] = Run(first, stop - first, *label)
            runs.append(run)
        return runs


def _cuts(  # noqa: C901 - one pass over sorted events, each kind a branch
    events: list[_Event], taken_labels: Sequence[_Label], slots: int
) -> list[tuple[int, _Label]]:
    """(first slot, label) wherever the label changes, from the sorted events."""
    cuts: list[tuple[int, _Label]] = []
    allowed = mine = 0
    taken: set[int] = set()
    count = len(events)
    i = 0
    while i < count:
        index = events[i][0]
        if index >= slots:
            break
        while i < count and events[i][0] == index:
            _, what, rank = events[i]
            i += 1
            if what == _ALLOWED_ON:
                allowed += 1
            elif what == _ALLOWED_OFF:
                allowed -= 1
            elif what == _MINE_ON:
                mine += 1
            elif what == _MINE_OFF:
                mine -= 1
            elif what == _TAKEN_ON:
                taken.add(rank)
            elif what == _TAKEN_OFF:
                taken.discard(rank)
        if mine > 0:
            label = _MINE
        elif taken:
            label = taken_labels[min(taken)]
        else:
            label = _FREE if allowed > 0 else _NOT_ALLOWED
        if not cuts or cuts[-1][1] != label:
            cuts.append((index, label))
    return cuts


# --- earliest slot ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """A time and the GPUs (uuids, by host and index) free and allowed for all of it."""

    start: datetime
    end: datetime
    gpus: tuple[str, ...]
    # In words, why these GPUs ("4 GPUs joined by NVLink on gpu-01"); and the choice's rank
    # among equal starts on other hosts (lower: better). Neither takes part in equality.
    why: str | None = field(default=None, compare=False)
    rank: Any = field(default=None, compare=False)

    def to_dict(self) -> dict[str, Any]:
        return {
            "start": self.start.isoformat(),
            "end": self.end.isoformat(),
            "gpus": list(self.gpus),
            "why": self.why,
        }


@dataclass(frozen=True)
class Locality:
    """What the choice among fitting GPUs weighs after idleness: each host's interconnect
    (best-connected set on one host, then the fewest hosts) and the packing (`pack`: the host
    with the fewest fitting GPUs first, `spread`: the most)."""

    topologies: Mapping[str, Topology]
    packing: str = PACK


@dataclass(frozen=True)
class IdleFirst:
    """For a slot that starts by `until` (now, give or take a poll): GPUs by `ranks` (uuid ->
    rank, lower first: idle now, then unknown, then in use; `default` for a missing uuid).
    Ties keep their (host, index) order."""

    ranks: Mapping[str, tuple[int, float]]
    until: datetime
    default: tuple[int, float] = (1, 0.0)

    def applies(self, start: datetime) -> bool:
        return start <= self.until

    def rank(self, uuid: str) -> tuple[int, float]:
        return self.ranks.get(uuid, self.default)

    def ordered(self, uuids: Sequence[str]) -> list[str]:
        return sorted(uuids, key=self.rank)  # stable: equal ranks stay in (host, index) order

    def load(self, uuids: Sequence[str]) -> tuple[float, ...]:
        """How busy a choice of GPUs is: its ranks' levels, then utilisations, summed."""
        ranks = [self.rank(uuid) for uuid in uuids]
        return (sum(level for level, _ in ranks), sum(util for _, util in ranks))


def earliest_slot(
    gpus: Sequence[Gpu],
    allowed: Mapping[str, Sequence[Interval]],
    busy: Mapping[str, Sequence[Interval]],
    count: int,
    duration: timedelta,
    not_before: datetime,
    horizon: datetime,
    same_host: bool = False,
    prefer: IdleFirst | None = None,
    locality: Locality | None = None,
) -> Slot | None:
    """The earliest [t, t + duration) within [not_before, horizon) when `count` GPUs are free.

    A GPU qualifies when one of its `allowed` intervals holds the whole slot and none of its
    `busy` intervals touches it. Both map uuid -> a *merged* list (as `intervals.merge`
    returns); a GPU missing from `allowed` is never allowed, one missing from `busy` is free.
    With `same_host` all GPUs come from one host. None if there is no such slot.
    Among the GPUs qualifying at that start (`services.shared.topology.choose_gpus`): the
    best-connected set on one host, then the fewest hosts; among equals the host with the
    fewest qualifying GPUs (`locality.packing` pack, the default) or the most (spread), then
    the first by (host, index); the slot's `why` says which it took and why.
    With `prefer`, a slot that starts by `prefer.until` takes the qualifying GPUs of lowest
    rank first (idle now before in use), and among hosts with equal starts the idlest wins.
    """
    if count < 1:
        raise ValueError("count must be at least 1")
    if duration <= timedelta(0):
        raise ValueError("duration must be longer than zero")
    ordered = sorted(gpus, key=lambda g: (g.host, g.index, g.uuid))
    groups = [list(group) for _, group in groupby(ordered, key=attrgetter("host"))]
    locality = locality or Locality({})
    best: Slot | None = None
    for group in groups if same_host else [ordered]:
        if len(group) < count:
            continue
        # A slot as early on another host may be better (idler, better joined, packed).
        latest = horizon - duration if best is None else best.start
        found = _earliest(
            group, allowed, busy, count, duration, not_before, latest, prefer, locality
        )
        if found is not None and (
            best is None or (found.start, found.rank) < (best.start, best.rank)
        ):
            best = found
    return best


def _earliest(
    gpus: Sequence[Gpu],
    allowed: Mapping[str, Sequence[Interval]],
    busy: Mapping[str, Sequence[Interval]],
    count: int,
    duration: timedelta,
    not_before: datetime,
    latest: datetime,
    prefer: IdleFirst | None = None,
    locality: Locality | None = None,
) -> Slot | None:
    """The earliest start in [not_before, latest] with `count` of `gpus` (ordered) fitting.

    Each round moves t to the count-th earliest fit at or after t; no start before that can
    have `count` GPUs fitting. It stops when that is t itself. A GPU's fit stays valid while
    t has not passed it, so each round recomputes only the GPUs t overtook.
    """
    tracks = [_Track(gpu, allowed.get(gpu.uuid, ()), busy.get(gpu.uuid, ())) for gpu in gpus]
    t = not_before
    while True:
        # A GPU with no fit at or after t has none later either: it is dropped for good.
        tracks = [tr for tr in tracks if tr.fit >= t or tr.fits_from(t, duration, latest)]
        if len(tracks) < count:
            return None
        kth = heapq.nsmallest(count, [track.fit for track in tracks])[-1]
        if kth == t:
            fitting = [track.gpu for track in tracks if track.fit == t]
            return _choose(fitting, count, t, duration, prefer, locality or Locality({}))
        t = kth


def _choose(
    fitting: Sequence[Gpu],
    count: int,
    t: datetime,
    duration: timedelta,
    prefer: IdleFirst | None,
    locality: Locality,
) -> Slot:
    """The slot at t with `count` of the GPUs `fitting` then (ordered by host, index)."""
    by_host: dict[str, list[tuple[int, str]]] = {}
    for gpu in fitting:
        by_host.setdefault(gpu.host, []).append((gpu.index, gpu.uuid))
    load = None
    if prefer is not None and prefer.applies(t):
        load = _load_of(prefer)
    choice = choose_gpus(by_host, count, locality.topologies, locality.packing, load)
    assert choice is not None  # at least `count` fit at t
    gpus = tuple(str(uuid) for uuid in choice.gpus)
    if load is not None:  # idle first, as before, within the chosen set
        gpus = tuple(prefer.ordered(gpus)) if prefer is not None else gpus
    return Slot(t, t + duration, gpus, choice.why, choice.rank)


def _load_of(prefer: IdleFirst) -> Any:
    """A set's load as (levels, utilisations): idle before in use weighs before the links,
    the utilisations after them."""

    def load(uuids: Sequence[Any]) -> tuple[float, float]:
        levels, utils = prefer.load([str(uuid) for uuid in uuids])
        return levels, utils

    return load


class _Track:
    """One GPU's earliest fit; t only grows, so its cursors into the lists only move on."""

    __slots__ = ("a", "allowed", "b", "busy", "fit", "gpu")

    def __init__(self, gpu: Gpu, allowed: Sequence[Interval], busy: Sequence[Interval]) -> None:
        self.gpu, self.allowed, self.busy = gpu, allowed, busy
        self.a = self.b = 0  # no allowed / busy interval before these ends after t
        self.fit = _UNKNOWN

    def fits_from(self, t: datetime, duration: timedelta, latest: datetime) -> bool:
        """Moves `fit` to the earliest s in [t, latest] with [s, s + duration) inside an
        allowed interval and clear of busy ones; False if there is none."""
        if self.fit >= t:
            return True
        allowed, busy = self.allowed, self.busy
        a = bisect_right(allowed, t, lo=self.a, key=_END)
        b = bisect_right(busy, t, lo=self.b, key=_END)
        while a < len(allowed) and t <= latest:
            window = allowed[a]
            t = max(t, window.start)
            if t + duration > window.end:
                a += 1
                continue
            while b < len(busy) and busy[b].end <= t:
                b += 1
            if b < len(busy) and busy[b].start < t + duration:
                t = busy[b].end
                b += 1
                while a < len(allowed) and allowed[a].end <= t:
                    a += 1
                continue
            if t > latest:
                break
            self.a, self.b, self.fit = a, b, t
            return True
        return False
