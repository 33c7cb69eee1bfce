"""What is checked before a job starts, by hand or when its time or its reservation comes (the
job commands and the engine both start jobs): the placement its tasks name, and whether its
owner may use those GPUs for the run (asked of the reservations service).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from services.jobs.state import JobState
from services.reservations import api as reservations_api
from services.shared.bus import Bus
from services.shared.errors import (
    NotAllowed,
    ReservationConflict,
    StateConflict,
    WardenError,
)

# A job started by hand without a declared run time: its GPUs must be usable at least now.
START_CHECK_WINDOW = timedelta(minutes=1)


def refusal_error(reasons: Sequence[Mapping[str, Any]]) -> WardenError:
    message = "; ".join(str(r.get("message", r)) for r in reasons[:3])
    if len(reasons) > 3:
        message += f" (and {len(reasons) - 3} more)"
    details = {"reasons": list(reasons)}
    if reasons and all(r.get("code") == "conflict" for r in reasons):
        return ReservationConflict(message, details)
    return NotAllowed(message, details)


def fixed_placement(state: JobState) -> dict[int, tuple[str, tuple[str, ...]]]:
    placement = {}
    for task in state.job.tasks:
        if task.host is None or task.gpu_count is not None:
            raise StateConflict(
                f"task {task.index} of job {state.id} asks for any {task.gpu_count} GPUs: "
                "queue the job, the scheduler places it",
                {"id": state.id, "task": task.index},
            )
        placement[task.index] = (task.host, task.gpus)
    return placement


def run_until(state: JobState, now: datetime) -> datetime:
    if state.stop_at is not None and state.stop_at > now:
        return state.stop_at
    if state.max_runtime_s is not None:
        return now + timedelta(seconds=state.max_runtime_s)
    return now + START_CHECK_WINDOW


async def use_refusals(
    bus: Bus, owner: str, gpus: Iterable[str], start: datetime, end: datetime
) -> list[dict[str, Any]]:
    wanted = sorted(set(gpus))
    if not wanted:
        return []
    answer = await reservations_api.CHECK_USE.call(
        bus,
        {"user": owner, "gpus": wanted, "start": start.isoformat(), "end": end.isoformat()},
    )
    reasons: list[dict[str, Any]] = answer["reasons"]
    return reasons
