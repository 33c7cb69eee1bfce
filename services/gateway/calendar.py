"""The gateway's own copy of the reservations calendar, so that reads do not cost an RPC.

The gateway may keep no durable state, but it may keep a copy built from events (DESIGN §2):
loaded once from the reservations service at start-up (a window around now) and kept current
from `reservation.*` events. Calendar range queries and each GPU's current and next
reservation are answered from it; a range it does not cover (far past, far future, before it
is loaded) goes to the service. Every item has the same shape either way: the fields of the
`reservation.*` events (`ITEM_KEYS`).

The gateway also applies the answers of its own create, edit, cancel and end calls at once, so
a client sees its change in the next read. Events may come twice, late or out of order: an
item never goes back to an older `updated_at`, a cancelled reservation stays cancelled unless
an update restores it, and the start-up load never overwrites what an event brought.

Read models built on the copy (the hosts board) register in `listeners`: each change tells
them which GPUs' reservations it changed.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right, insort
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import chain
from typing import Any

# What a calendar item holds (ReservationData in services/shared/contracts/reservations.py).
ITEM_KEYS = (
    "id",
    "owner",
    "gpus",
    "start",
    "end",
    "title",
    "description",
    "status",
    "created_by",
    "cancelled_at",
    "cancelled_by",
    "cancel_reason",
    "guests",
    "updated_at",
)
# How far back the copy keeps reservations (older ones are dropped and asked for by RPC).
KEEP_PAST = timedelta(weeks=8)
LOAD_AHEAD = timedelta(weeks=52)
# Answers of `between` kept for the reads that come again (a calendar page polling), each
# with the version of its GPUs; all dropped at once when there are this many, or when they
# hold this many reservations together (each asks for a range and GPUs of its caller's
# choosing: 4,096 answers over a busy year were hundreds of MiB of lists).
ANSWERS_KEPT = 4096
ANSWER_ITEMS_KEPT = 100_000


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def item(data: Mapping[str, Any]) -> dict[str, Any]:
    """A reservation (event data or RPC answer) as a calendar item."""
    shown = {key: data.get(key) for key in ITEM_KEYS}
    shown["gpus"] = [
        {"uuid": g["uuid"], "host": g["host"], "index": g.get("index")}
        for g in data.get("gpus") or ()
    ]
    shown["guests"] = list(data.get("guests") or ())
    shown["description"] = data.get("description") or ""
    return shown


def _older(new: Mapping[str, Any], old: Mapping[str, Any]) -> bool:
    if not new.get("updated_at") or not old.get("updated_at"):
        return False
    return _time(new["updated_at"]) < _time(old["updated_at"])


@dataclass(eq=False)  # each one is itself: the same reservation in several GPUs' lists
class _Entry:
    data: dict[str, Any]
    start: datetime
    end: datetime
    gpus: frozenset[str]

    @property
    def active(self) -> bool:
        """Holds its GPUs for its time (an ended one did, and still shows there)."""
        return self.data["status"] != "cancelled"


def _order(entry: _Entry) -> tuple[datetime, int]:
    return entry.start, int(entry.data["id"])


def _start(entry: _Entry) -> datetime:
    return entry.start


class CalendarView:
    def __init__(self) -> None:
        self._by_id: dict[int, _Entry] = {}
        self._by_gpu: dict[str, list[_Entry]] = {}  # each GPU's, by start then id
        self._cancelled: set[int] = set()
        # The range the copy is complete for; None until loaded.
        self.covers_from: datetime | None = None
        self.covers_until: datetime | None = None
        # Called after each change with the GPUs whose reservations it changed.
        self.listeners: list[Callable[[frozenset[str]], None]] = []
        # Counts changes; `_changed_at[uuid]`: the count when that GPU's reservations last
        # changed (the version of an answer about some GPUs: `version`).
        self.changes = 0
        self._changed_at: dict[str, int] = {}
        self._answers: dict[tuple[Any, ...], tuple[int, list[dict[str, Any]]]] = {}
        self._items_kept = 0  # reservations in `_answers`' lists together

    def __len__(self) -> int:
        return len(self._by_id)

    # --- keeping it current --------------------------------------------------------------

    def load(
        self, reservations: Iterable[Mapping[str, Any]], start: datetime, end: datetime
    ) -> None:
        """What the service answered for [start, end); entries already here are newer."""
        changed: set[str] = set()
        for data in reservations:
            if int(data["id"]) not in self._by_id:
                changed |= self._put(item(data))
        self.covers_from, self.covers_until = start, end
        self._drop_answers()
        self._tell(changed)

    def apply(self, event_type: str, data: Mapping[str, Any]) -> None:
        reservation_id = int(data["id"])
        shown = item(data)
        if event_type == "reservation.cancelled" or shown["status"] == "cancelled":
            self._cancelled.add(reservation_id)
            shown["status"] = "cancelled"
        elif event_type == "reservation.updated" and "status" in data.get("changed", ()):
            self._cancelled.discard(reservation_id)  # restored by an access change
        elif reservation_id in self._cancelled:
            shown["status"] = "cancelled"  # a late created/updated does not revive it
        self._tell(self._put(shown))

    def prune(self, now: datetime) -> None:
        """Forget what ended long ago; the copy then covers from `now - KEEP_PAST`."""
        horizon = now - KEEP_PAST
        changed: set[str] = set()
        for entry in [e for e in self._by_id.values() if e.end < horizon]:
            changed |= self._remove(int(entry.data["id"]))
        if self.covers_from is not None and self.covers_from < horizon:
            self.covers_from = horizon
        self._tell(changed)

    def forget(self) -> None:
        """Events were missed (the broker was away): nothing here can be vouched for. The copy
        covers nothing (lists are asked of the service) until it is loaded again."""
        changed = set(self._by_gpu)
        self._by_id.clear()
        self._by_gpu.clear()
        self._cancelled.clear()
        self._drop_answers()  # what was dropped here moved no version
        self.covers_from = self.covers_until = None
        self._tell(changed)

    def _tell(self, gpus: Set[str]) -> None:
        if gpus:
            changed = frozenset(gpus)
            for listener in self.listeners:
                listener(changed)

    def _put(self, shown: dict[str, Any]) -> frozenset[str]:
        """Keep `shown` unless what is here is newer; the GPUs whose reservations changed."""
        reservation_id = int(shown["id"])
        known = self._by_id.get(reservation_id)
        if known is not None and (known.data == shown or _older(shown, known.data)):
            # The same again (the event of our own answer), or a late event: the answer of a
            # later change is already here.
            return frozenset()
        before = self._remove(reservation_id)
        self.changes += 1
        entry = _Entry(
            shown,
            _time(shown["start"]),
            _time(shown["end"]),
            frozenset(g["uuid"] for g in shown["gpus"]),
        )
        self._by_id[reservation_id] = entry
        for uuid in entry.gpus:
            insort(self._by_gpu.setdefault(uuid, []), entry, key=_order)
            self._changed_at[uuid] = self.changes
        return before | entry.gpus

    def _remove(self, reservation_id: int) -> frozenset[str]:
        """Forget the reservation; the GPUs it was on."""
        entry = self._by_id.pop(reservation_id, None)
        if entry is None:
            return frozenset()
        self.changes += 1
        for uuid in entry.gpus:
            self._changed_at[uuid] = self.changes
            on_gpu = self._by_gpu[uuid]
            del on_gpu[bisect_left(on_gpu, _order(entry), key=_order)]
            if not on_gpu:
                del self._by_gpu[uuid]
        return entry.gpus

    # --- reading -------------------------------------------------------------------------

    def version(self, gpus: Iterable[str] | None = None) -> int:
        """Grows whenever a reservation on one of `gpus` (None: any) changes: while it stays,
        every reservation a read of those GPUs finds is as it was."""
        if gpus is None:
            return self.changes
        return max((self._changed_at.get(uuid, 0) for uuid in gpus), default=0)

    def covers(self, start: datetime, end: datetime) -> bool:
        return (
            self.covers_from is not None
            and self.covers_until is not None
            and self.covers_from <= start
            and end <= self.covers_until
        )

    def between(
        self,
        start: datetime,
        end: datetime,
        gpus: Iterable[str] | None = None,
        *,
        owner: str | None = None,
        include_cancelled: bool = False,
    ) -> list[dict[str, Any]]:
        """Reservations overlapping [start, end) on `gpus` (all when None), by start then id.
        The list is shared with later calls that ask the same: do not change it."""
        asked = None if gpus is None else tuple(gpus)
        key = (start, end, asked, owner, include_cancelled)
        version = self.version(asked)
        kept = self._answers.get(key)
        if kept is not None and kept[0] == version:
            return kept[1]
        if asked is None:
            candidates: Iterable[_Entry] = self._by_id.values()
        else:
            candidates = dict.fromkeys(  # once each, when on several of the GPUs
                chain.from_iterable(self._starting_before(uuid, end) for uuid in asked)
            )
        chosen = [
            entry
            for entry in candidates
            if entry.start < end
            and start < entry.end
            and (include_cancelled or entry.active)
            and (owner is None or entry.data["owner"] == owner)
        ]
        chosen.sort(key=lambda entry: (entry.start, entry.data["id"]))
        found = [entry.data for entry in chosen]
        if len(self._answers) >= ANSWERS_KEPT or self._items_kept + len(found) > ANSWER_ITEMS_KEPT:
            self._drop_answers()
        self._answers[key] = (version, found)
        self._items_kept += len(found)
        return found

    def _drop_answers(self) -> None:
        self._answers.clear()
        self._items_kept = 0

    def _starting_before(self, gpu_uuid: str, end: datetime) -> list[_Entry]:
        """The GPU's reservations that start before `end`, by start."""
        on_gpu = self._by_gpu.get(gpu_uuid, [])
        return on_gpu[: bisect_left(on_gpu, end, key=_start)]

    def now_and_next(
        self, gpu_uuid: str, now: datetime, ahead: timedelta
    ) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The active reservation holding the GPU at `now`, and the next one starting within
        `ahead` (before `now + ahead`). A GPU's active reservations never overlap (the service
        refuses conflicts): the last one started by `now` holds it, unless it has ended."""
        entries = self._by_gpu.get(gpu_uuid, [])
        started = bisect_right(entries, now, key=_start)
        current = next((e for e in reversed(entries[:started]) if e.active), None)
        if current is not None and current.end <= now:
            current = None
        coming = next((e for e in entries[started:] if e.active), None)
        if coming is not None and coming.start >= now + ahead:
            coming = None
        return (
            current.data if current else None,
            coming.data if coming else None,
        )
