"""The jobs queue: its order, why each job waits, its predicted start, and each user's share
and recent usage (fair share, `[queue]`). Any signed-in user reads it; it is the same for all."""

from __future__ import annotations

from typing import Any

from services.gateway.routing import Access, Call, Route
from services.jobs import api
from services.jobs.api import QueueSchema


async def get_queue(call: Call) -> dict[str, Any]:
    answer: dict[str, Any] = await call.rpc(api.GET_QUEUE, {})
    return answer


ROUTES = (
    Route(
        "GET",
        "/queue",
        get_queue,
        Access.USER,
        "The queue in the order jobs get GPUs, with reasons and predicted starts",
        "jobs",
        response=QueueSchema,
        description="`jobs` in order (position 1 goes next): why each waits and its predicted "
        "start (null: not within `horizon_h`); `users`: each one's share and decayed GPU-hours, "
        "lowest usage for their share first. The live stream's `queue.changed` event carries "
        "the same answer when it changes.",
    ),
)
