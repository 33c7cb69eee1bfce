"""The monitor's public call contract: its RPC methods, their arguments and answers, and the
errors they raise (see `services.shared.rpc`). Its events are in `services.shared.contracts`.
"""

from __future__ import annotations

from marshmallow import Schema, fields, validate

from services.shared.errors import InvalidRequest, NotFound
from services.shared.rpc import Answer, methods_of

SERVICE = "monitor"
_method = methods_of(SERVICE)

# A series may not ask for more buckets than this (range / step).
MAX_BUCKETS = 10_000

_Str = fields.String
_Num = fields.Float
_Time = fields.AwareDateTime


# --- arguments ----------------------------------------------------------------------------------


class SnapshotArgs(Schema):
    host = _Str(load_default=None, allow_none=True)


class SeriesArgs(Schema):
    host = _Str(required=True, validate=validate.Length(min=1, max=255))
    metric = _Str(
        required=True,
        validate=validate.Length(min=1, max=64),
        metadata={
            "description": "a host metric (cpu_percent, load_1m, memory_used_mib, ...) or, "
            "with gpu_uuid, a GPU metric (utilization_gpu_percent, temperature_c, ...)"
        },
    )
    start = _Time(required=True)
    end = _Time(required=True)
    step_s = _Num(
        required=True,
        validate=validate.Range(min=1, max=366 * 86400),
        metadata={"description": "seconds per bucket, at least 1"},
    )
    gpu_uuid = _Str(
        allow_none=True,
        validate=validate.Length(min=1, max=128),
        metadata={"description": "the GPU, for a GPU metric"},
    )


class StatsArgs(Schema):
    reset = fields.Boolean(
        load_default=False, metadata={"description": "start the counters again after answering"}
    )


# --- answers ------------------------------------------------------------------------------------


class SeriesBucketSchema(Answer):
    start = _Time(required=True)
    min = _Num(required=True, allow_none=True)
    avg = _Num(required=True, allow_none=True)
    max = _Num(required=True, allow_none=True)
    count = fields.Integer(required=True)


class SeriesSchema(Answer):
    host = _Str(required=True)
    gpu_uuid = _Str(required=True, allow_none=True)
    metric = _Str(required=True)
    step_s = _Num(required=True)
    buckets = fields.List(fields.Nested(SeriesBucketSchema), required=True)


# --- methods ------------------------------------------------------------------------------------

SNAPSHOT = _method(
    "snapshot",
    "Latest state of every host (or `host`): figures, GPUs, processes, reachability",
    SnapshotArgs,
    raises=(InvalidRequest, NotFound),
)
SERIES = _method(
    "series",
    "Buckets (min/avg/max/count) of one metric of a host or GPU over a time range",
    SeriesArgs,
    answer=SeriesSchema,
    raises=(InvalidRequest,),
)
STATS = _method(
    "stats",
    "Polls, failures, missed ticks and sample age (tick to published event)",
    StatsArgs,
    raises=(InvalidRequest,),
)

METHODS = (SNAPSHOT, SERIES, STATS)
