"""The overview grid as run-length cells (pure): what `planner.overview_by_gpu` answers, made
from plain slot rows without a Booking or Run object per reservation or run.

Each GPU's row is painted (C-speed slice assignment) and read back only where a booking or
an allowed interval begins or ends, so the work follows the bookings, not the slots:
not_allowed, then the allowed slots free, then others' bookings latest-ranked first (so the
one that starts first wins a slot), then the viewer's own. That is the order of precedence of
`planner.overview_runs` (mine > taken > not_allowed / free); tests prove both agree.

A row is a flat list `[label, count, label, count, ...]`; labels index `Grid.labels`, each a
(state, owner, reservation_id) triple: 0 free, 1 mine, 2 not_allowed, 3.. taken.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from operator import itemgetter
from typing import Any

from services.reservations.rules.domain import Interval
from services.reservations.rules.intervals import merge
from services.reservations.rules.planner import FREE, MINE, NOT_ALLOWED, TAKEN

Label = tuple[str, str | None, int | None]  # (state, owner, reservation_id)
# (gpu_uuid, reservation_id, owner, start_ms, end_ms): a row of `reads.busy_slots` as it is
SlotRow = tuple[str, int, str, int, int]

FREE_LABEL, MINE_LABEL, NOT_ALLOWED_LABEL = 0, 1, 2
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


class Grid:
    """The cells of GPUs over `slots` slots from `start`; one instance per overview."""

    def __init__(self, me: str, start: datetime, slot: timedelta, slots: int) -> None:
        if slot <= timedelta(0):
            raise ValueError("slot must be longer than zero")
        self.me, self.slots = me, max(slots, 0)
        self.labels: list[Label] = [
            (FREE, None, None),
            (MINE, None, None),
            (NOT_ALLOWED, None, None),
        ]
        self._taken: dict[int, int] = {}  # reservation id -> its label
        # Slot arithmetic in whole microseconds (exact, as timedelta // timedelta is).
        unit = timedelta(microseconds=1)
        self._start_us = (start - _EPOCH) // unit
        self._slot_us = slot // unit
        self._start, self._slot = start, slot
        # By id() of an allowed list, holding the list so that the id stays its own.
        self._base: dict[int, tuple[Sequence[Interval], list[int], list[int]]] = {}
        self._idle: dict[int, list[int]] = {}  # encoded base rows, by id(allowed)

    def row(  # noqa: C901 - the overview's hot loop, inlined on purpose
        self, allowed: Sequence[Interval], bookings: Sequence[SlotRow]
    ) -> list[int]:
        """One GPU's cells. GPUs without bookings that share an allowed list share its row:
        do not mutate it."""
        if self.slots == 0:
            return []
        base, base_cuts = self._painted_base(allowed)
        me = self.me
        others = [b for b in bookings if b[2] != me]
        mine = [b for b in bookings if b[2] == me] if len(others) < len(bookings) else []
        if not mine and not others:
            row = self._idle.get(id(allowed))
            if row is None:
                row = self._idle[id(allowed)] = _encode(base, base_cuts, self.slots)
            return row
        cells = base.copy()
        cuts = base_cuts.copy()
        # Lowest (start, id) wins a slot: paint the others latest first, then one's own.
        others.sort(key=_START_ID, reverse=True)
        taken, labels = self._taken, self.labels
        start_us, slot_us, slots = self._start_us, self._slot_us, self.slots
        for group in (others, mine):
            for _, rid, owner, begin_ms, end_ms in group:
                if end_ms <= begin_ms:
                    continue
                # Every slot it overlaps: floor of its start to ceil of its end (clipped).
                first = (begin_ms * 1000 - start_us) // slot_us
                if first < 0:
                    first = 0
                stop = -((start_us - end_ms * 1000) // slot_us)
                if stop > slots:
                    stop = slots
                if first >= stop:
                    continue
                if group is mine:
                    label = MINE_LABEL
                else:
                    label = taken.get(rid, -1)
                    if label < 0:
                        label = taken[rid] = len(labels)
                        labels.append((TAKEN, owner, rid))
                cells[first:stop] = [label] * (stop - first)
                cuts.append(first)
                cuts.append(stop)
        return _encode(cells, cuts, slots)

    def _painted_base(self, allowed: Sequence[Interval]) -> tuple[list[int], list[int]]:
        """The allowed list's cells (not_allowed / free) and where they may change."""
        known = self._base.get(id(allowed))
        if known is None:
            cells = [NOT_ALLOWED_LABEL] * self.slots
            cuts = [0]
            for interval in merge(allowed):  # only slots wholly inside allowed time count
                first = max(-((self._start - interval.start) // self._slot), 0)  # ceil
                stop = min((interval.end - self._start) // self._slot, self.slots)  # floor
                if first < stop:
                    cells[first:stop] = [FREE_LABEL] * (stop - first)
                    cuts += (first, stop)
            known = self._base[id(allowed)] = (allowed, cells, cuts)  # holding it keeps its id
        return known[1], known[2]


_START_ID = itemgetter(3, 1)


def _encode(cells: list[int], cuts: list[int], slots: int) -> list[int]:
    """[label, count, ...] of `cells`, which change label only at some of `cuts` (0 among
    them, none past `slots`)."""
    row: list[int] = []
    first, last = 0, -1
    for stop in sorted({*cuts, slots})[1:]:  # the first is 0
        label = cells[first]
        if label == last:
            row[-1] += stop - first
        else:
            row += (label, stop - first)
            last = label
        first = stop
    return row


def label_dict(label: Label) -> dict[str, Any]:
    state, owner, reservation_id = label
    return {"state": state, "owner": owner, "reservation_id": reservation_id}


def runs_of(row: Sequence[int], labels: Sequence[Label]) -> list[dict[str, Any]]:
    """A row as the full answer's runs: {first, count, state, owner, reservation_id}."""
    runs = []
    first = 0
    for i in range(0, len(row), 2):
        count = row[i + 1]
        state, owner, reservation_id = labels[row[i]]
        runs.append(
            {
                "first": first,
                "count": count,
                "state": state,
                "owner": owner,
                "reservation_id": reservation_id,
            }
        )
        first += count
    return runs


def by_gpu(rows: Iterable[SlotRow]) -> dict[str, list[SlotRow]]:
    """Slot rows by their GPU (the rows themselves: no copy)."""
    found: dict[str, list[SlotRow]] = {}
    for row in rows:
        found.setdefault(row[0], []).append(row)
    return found
