"""Which reservation holds which GPU when: a service's own copy of the calendar (pure).

The violations and jobs services each keep one (a service never reads another's tables).

Built from an RPC answer at start-up and kept up to date from `reservation.*` events, which may
arrive more than once or out of order: a cancelled or ended reservation leaves a tombstone so a
late `created` does not bring it back; only a `reservation.updated` that restores it
(status active again) does.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Holding:
    """A reservation as the detector needs it."""

    reservation_id: int
    owner: str
    guests: frozenset[str]
    start: datetime
    end: datetime
    gpus: Mapping[str, tuple[str, int | None]]  # uuid -> (host, index)

    def covers(self, at: datetime) -> bool:
        return self.start <= at < self.end

    def may_use(self, user: str) -> bool:
        return user == self.owner or user in self.guests

    @classmethod
    def from_data(cls, data: Mapping[str, Any]) -> Holding:
        """From reservation event data or an RPC answer (times ISO-8601)."""
        return cls(
            reservation_id=int(data["id"]),
            owner=data["owner"],
            guests=frozenset(data.get("guests") or ()),
            start=_time(data["start"]),
            end=_time(data["end"]),
            gpus={g["uuid"]: (g["host"], g.get("index")) for g in data["gpus"]},
        )


def _time(value: Any) -> datetime:
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


class ReservationBook:
    def __init__(self) -> None:
        self._by_id: dict[int, Holding] = {}
        self._by_gpu: dict[str, list[Holding]] = {}
        self._gone: set[int] = set()

    def __len__(self) -> int:
        return len(self._by_id)

    def load(self, reservations: Iterable[Mapping[str, Any]]) -> None:
        for data in reservations:
            gone = int(data["id"]) in self._gone  # an event applied meanwhile is newer
            if data.get("status", "active") != "cancelled" and not gone:
                self._put(Holding.from_data(data))

    def apply(self, event_type: str, data: Mapping[str, Any]) -> Holding | None:
        """Apply one reservation.* event; returns the reservation if it no longer holds GPUs."""
        reservation_id = int(data["id"])
        if event_type in ("reservation.cancelled", "reservation.ended") or (
            data.get("status") == "cancelled"
        ):
            self._gone.add(reservation_id)
            return self._remove(reservation_id) or Holding.from_data(data)
        if event_type == "reservation.updated" and "status" in data.get("changed", ()):
            self._gone.discard(reservation_id)  # restored
        if reservation_id in self._gone:
            return None
        self._put(Holding.from_data(data))
        return None

    def holding(self, gpu_uuid: str, at: datetime) -> Holding | None:
        for held in self._by_gpu.get(gpu_uuid, ()):
            if held.covers(at):
                return held
        return None

    def on_gpu(self, gpu_uuid: str) -> list[Holding]:
        """The GPU's reservations, by start time."""
        return sorted(self._by_gpu.get(gpu_uuid, ()), key=lambda held: held.start)

    def get(self, reservation_id: int) -> Holding | None:
        return self._by_id.get(reservation_id)

    def all(self) -> list[Holding]:
        return list(self._by_id.values())

    def ended(self, now: datetime) -> list[Holding]:
        """Remove and return the reservations whose end has passed."""
        over = [held for held in self._by_id.values() if held.end <= now]
        for held in over:
            self._remove(held.reservation_id)
        return over

    def _put(self, held: Holding) -> None:
        self._remove(held.reservation_id)
        self._by_id[held.reservation_id] = held
        for uuid in held.gpus:
            self._by_gpu.setdefault(uuid, []).append(held)

    def _remove(self, reservation_id: int) -> Holding | None:
        held = self._by_id.pop(reservation_id, None)
        if held is not None:
            for uuid in held.gpus:
                remaining = [h for h in self._by_gpu[uuid] if h.reservation_id != reservation_id]
                if remaining:
                    self._by_gpu[uuid] = remaining
                else:
                    del self._by_gpu[uuid]
        return held
