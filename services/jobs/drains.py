"""The maintenance windows the queue keeps out of (pure): a copy of the reservations service's
windows, loaded at start (`reservations.list_maintenance`) and kept from its
`maintenance.scheduled` and `maintenance.ended` events. The queue places no work on a drained
GPU that would run into its window; running jobs are left alone, unless the admin asked for
them to be stopped (`stop_jobs`): then they are, when the window begins (`stopping`)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class Drain:
    host: str
    indices: frozenset[int] | None  # None: every GPU of the host
    start: datetime
    end: datetime | None  # None: until an admin ends it
    stop_jobs: bool = False
    why: str = ""  # "maintenance of dgx1:0: new fan"

    def covers(self, host: str, index: int | None) -> bool:
        return host == self.host and (self.indices is None or index in self.indices)


def _when(value: Any) -> datetime | None:
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


def drain_of(data: Mapping[str, Any]) -> Drain:
    gpus = data.get("gpus")
    start = _when(data["start"])
    assert start is not None
    return Drain(
        data["host"],
        None if gpus is None else frozenset(gpus),
        start,
        _when(data["end"]),
        bool(data.get("stop_jobs")),
        f"maintenance of {data.get('target') or data['host']}: {data.get('reason') or ''}",
    )


class DrainBook:
    def __init__(self) -> None:
        self.windows: dict[int, Drain] = {}

    def load(self, windows: Iterable[Mapping[str, Any]]) -> None:
        """What the reservations service answered at start-up (events may have come first:
        those stay as they are)."""
        for data in windows:
            self.windows.setdefault(int(data["id"]), drain_of(data))

    def apply(self, event_type: str, data: Mapping[str, Any]) -> None:
        window_id = int(data["id"])
        if event_type == "maintenance.ended" and data.get("status") == "removed":
            self.windows.pop(window_id, None)
        else:  # scheduled, or ended early: its end moved to when it was ended
            self.windows[window_id] = drain_of(data)

    def by_gpu(
        self, gpus: Mapping[str, tuple[str, int | None]], now: datetime
    ) -> dict[str, list[tuple[datetime, datetime | None]]]:
        """uuid -> the (start, end) of the windows not over at `now` that drain it."""
        found: dict[str, list[tuple[datetime, datetime | None]]] = {}
        current = [w for w in self.windows.values() if w.end is None or w.end > now]
        if not current:
            return found
        for uuid, (host, index) in gpus.items():
            for window in current:
                if window.covers(host, index):
                    found.setdefault(uuid, []).append((window.start, window.end))
        return found

    def stopping(self, gpus: Mapping[str, tuple[str, int | None]], now: datetime) -> dict[str, str]:
        """uuid -> why, for the GPUs drained at `now` by a window whose admin asked for the
        jobs on them to be stopped."""
        found: dict[str, str] = {}
        current = [
            w
            for w in self.windows.values()
            if w.stop_jobs and w.start <= now and (w.end is None or now < w.end)
        ]
        for uuid, (host, index) in gpus.items():
            for window in current:
                if window.covers(host, index):
                    found.setdefault(uuid, window.why)
        return found
