"""What the monitor answers: RPC methods (beside `health`). It consumes no events (timers)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate

from services.monitor.monitor import Monitor, MonitorStats
from services.monitor.tsdb.base import MetricsStore
from services.shared.bus import EventHandler, RpcHandler
from services.shared.errors import InvalidRequest, NotFound

# A series may not ask for more buckets than this (range / step).
MAX_BUCKETS = 10_000


class SeriesArgs(Schema):
    host = fields.String(required=True, validate=validate.Length(min=1))
    metric = fields.String(required=True, validate=validate.Length(min=1))
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    step_s = fields.Float(required=True, validate=validate.Range(min=1, max=366 * 86400))
    gpu_uuid = fields.String(load_default=None, allow_none=True)


class SnapshotArgs(Schema):
    host = fields.String(load_default=None, allow_none=True)


def _load(schema: Schema, args: dict[str, Any]) -> dict[str, Any]:
    try:
        loaded: dict[str, Any] = schema.load(args)
    except ValidationError as err:
        raise InvalidRequest("invalid arguments", {"errors": err.normalized_messages()}) from err
    return loaded


def rpc_methods(monitor: Monitor, store: MetricsStore) -> dict[str, RpcHandler]:
    async def snapshot(args: dict[str, Any]) -> dict[str, Any]:
        """Latest state of every host (or `host`): figures, GPUs, processes, reachability."""
        host = _load(SnapshotArgs(), args)["host"]
        if host is not None and host not in monitor.states:
            raise NotFound(f"no host named {host!r}", {"host": host})
        return monitor.snapshot(host)

    async def series(args: dict[str, Any]) -> dict[str, Any]:
        """Buckets (min/avg/max/count) of one metric of a host or GPU over a time range."""
        query = _load(SeriesArgs(), args)
        start: datetime = query["start"]
        end: datetime = query["end"]
        if end <= start:
            raise InvalidRequest("end must be after start", {"start": args["start"]})
        if (end - start) / timedelta(seconds=query["step_s"]) > MAX_BUCKETS:
            raise InvalidRequest(
                f"too many buckets: make step_s larger (at most {MAX_BUCKETS} per query)"
            )
        buckets = await store.series(
            query["host"], query["metric"], start, end, query["step_s"], query["gpu_uuid"]
        )
        return {
            "host": query["host"],
            "gpu_uuid": query["gpu_uuid"],
            "metric": query["metric"],
            "step_s": query["step_s"],
            "buckets": [
                {
                    "start": b.start.isoformat(),
                    "min": b.min,
                    "avg": b.avg,
                    "max": b.max,
                    "count": b.count,
                }
                for b in buckets
            ],
        }

    async def stats(args: dict[str, Any]) -> dict[str, Any]:
        """Polls, failures, missed ticks and sample age (tick to published event).

        With `{"reset": true}` the counters start again after this answer.
        """
        figures = {"hosts": len(monitor.states), **monitor.stats.as_dict()}
        if args.get("reset") is True:
            monitor.stats = MonitorStats()
        return figures

    return {"snapshot": snapshot, "series": series, "stats": stats}


# The monitor runs on timers; it consumes no events.
EVENT_HANDLERS: dict[tuple[str, str, str], EventHandler] = {}
