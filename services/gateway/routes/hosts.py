"""Hosts and GPUs as they are now: the monitor's latest figures and processes, with who holds each
GPU now and next (served from the app's `FleetBoard`, `services/gateway/fleet_board.py`); and
the metric series of a host or GPU.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.gateway.context import BOARD
from services.gateway.etag import conditional, make_tag
from services.gateway.fleet_board import MAX_AGE_S
from services.gateway.routing import Access, Call, Route
from services.monitor import api as monitor_api
from services.monitor.api import SeriesSchema
from services.reservations.api import ReservationSchema
from services.shared.rpc import Answer

_Str = fields.String
_Num = fields.Float
_Time = fields.AwareDateTime


# --- schemas -----------------------------------------------------------------------------------


class HostPath(Schema):
    name = _Str(required=True, validate=validate.Length(min=1, max=255))


_LABEL = {
    "description": "only the hosts that carry this label: an inventory label, or a label "
    "of one of their GPUs (model=H200)"
}


class HostsQuery(Schema):
    label = _Str(validate=validate.Length(min=1, max=63), metadata=_LABEL)


class GpusQuery(Schema):
    host = _Str(
        validate=validate.Length(min=1, max=255), metadata={"description": "only this host's"}
    )
    label = _Str(
        validate=validate.Length(min=1, max=63),
        metadata={
            "description": "only the GPUs of hosts that carry this inventory label, or only "
            "the GPUs that carry this hardware label (model=H200)"
        },
    )


class SeriesQuery(monitor_api.SeriesArgs):
    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        if "start" in data and "end" in data and data["end"] <= data["start"]:
            raise ValidationError("must be after start", "end")


class ProcessOnGpuSchema(Answer):
    pid = fields.Integer(required=True)
    user = _Str(required=True, allow_none=True, metadata={"description": "null: not known"})
    command = _Str(required=True)
    used_memory_mib = _Num(required=True, allow_none=True)
    started_at = _Time(required=True, allow_none=True)


_NULL_WHEN_ABSENT = {"description": "null when not reported (never 0)"}


def _figure() -> fields.Float:
    return _Num(required=True, allow_none=True, metadata=_NULL_WHEN_ABSENT)


class GpuHealthSchema(Answer):
    state = _Str(
        required=True,
        metadata={
            "description": "ok, degraded (marked, still bookable) or failed (out of the pool: "
            "no new booking or queued job until it reads healthy for [health] healthy_for_s)"
        },
    )
    reason = _Str(required=True, allow_none=True, metadata={"description": "the signals read"})
    since = _Time(required=True, allow_none=True, metadata={"description": "null: not read yet"})


class GpuStateSchema(Answer):
    """A GPU now: its figures, its processes, who holds it now and who next."""

    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True)
    name = _Str(required=True, allow_none=True)
    # GPU_FIGURES, each null when the GPU does not report it
    utilization_gpu_percent = _figure()
    utilization_memory_percent = _figure()
    memory_used_mib = _figure()
    memory_total_mib = _figure()
    temperature_c = _figure()
    power_draw_w = _figure()
    power_limit_w = _figure()
    fan_speed_percent = _figure()
    clock_sm_mhz = _figure()
    clock_memory_mhz = _figure()
    labels = fields.List(
        _Str(), metadata={"description": "labels from the hardware: model=, memory=, arch="}
    )
    processes = fields.List(
        fields.Nested(ProcessOnGpuSchema),
        required=True,
        metadata={"description": "the processes using this GPU"},
    )
    reservation = fields.Nested(
        ReservationSchema,
        required=True,
        allow_none=True,
        metadata={"description": "the reservation holding it now"},
    )
    next_reservation = fields.Nested(
        ReservationSchema,
        required=True,
        allow_none=True,
        metadata={"description": "the next one, starting within 7 days"},
    )
    reachable = fields.Boolean(required=True, allow_none=True)
    sampled_at = _Time(required=True, allow_none=True)
    present = fields.Boolean(
        required=True,
        metadata={
            "description": "false: not in its host's latest reading (the host is down since "
            "before the monitor started, or its GPUs did not answer); shown as known from "
            "before, with no figures"
        },
    )
    health = fields.Nested(GpuHealthSchema, required=True)


class TopologyGpuSchema(Answer):
    index = fields.Integer(required=True)
    links = fields.List(
        _Str(),
        required=True,
        metadata={
            "description": "what joins it to each GPU of the matrix, in the matrix's order: X "
            "(itself), NV# (# bonded NVLinks), PIX, PXB, PHB, NODE, SYS (best to worst)"
        },
    )
    cpu_affinity = _Str(required=True, allow_none=True, metadata={"description": "e.g. 0-15,32-47"})
    numa_node = fields.Integer(required=True, allow_none=True)


class TopologySchema(Answer):
    """The host's GPU interconnect, as `nvidia-smi topo -m` prints it."""

    gpus = fields.List(fields.Nested(TopologyGpuSchema), required=True)


class HostStateSchema(Answer):
    """A host now: reachability, its latest figures (null before the first sample) and GPUs."""

    name = _Str(required=True)
    labels = fields.List(
        _Str(),
        required=True,
        metadata={"description": "the groups the host belongs to (set in the inventory)"},
    )
    gpu_labels = fields.List(
        _Str(), metadata={"description": "every label of its GPUs (from the hardware), sorted"}
    )
    reachable = fields.Boolean(
        required=True, allow_none=True, metadata={"description": "null: not polled yet"}
    )
    down_since = _Time(required=True, allow_none=True)
    down_reason = _Str(required=True, allow_none=True)
    last_seen = _Time(required=True, allow_none=True)
    sampled_at = _Time(required=True, allow_none=True)
    cpu_percent = _Num(required=True, allow_none=True)
    load_1m = _Num(required=True, allow_none=True)
    load_5m = _Num(required=True, allow_none=True)
    load_15m = _Num(required=True, allow_none=True)
    memory_used_mib = _Num(required=True, allow_none=True)
    memory_total_mib = _Num(required=True, allow_none=True)
    gpu_status = _Str(
        required=True,
        allow_none=True,
        metadata={"description": "ok, no_gpu, no_nvidia_smi or error: why gpus may be empty"},
    )
    gpu_error = _Str(required=True, allow_none=True)
    topology = fields.Nested(
        TopologySchema,
        allow_none=True,
        metadata={"description": "null: not read yet, or the host prints no matrix"},
    )
    gpus = fields.List(fields.Nested(GpuStateSchema), required=True)


class HostsSchema(Answer):
    hosts = fields.List(fields.Nested(HostStateSchema), required=True)
    generated_at = _Time(required=True)


class GpusSchema(Answer):
    gpus = fields.List(fields.Nested(GpuStateSchema), required=True)
    generated_at = _Time(required=True)


def _json(body: bytes) -> web.Response:
    return web.Response(body=body, content_type="application/json")


# --- handlers ----------------------------------------------------------------------------------


async def list_hosts(call: Call) -> web.Response:
    composed = await call.request.app[BOARD].composition(call.rpc)
    return _json(composed.answer(call.user, "hosts", label=call.query.get("label")))


async def get_host(call: Call) -> web.Response:
    composed = await call.request.app[BOARD].composition(call.rpc)
    return _json(composed.answer(call.user, "host", call.params["name"]))


async def list_gpus(call: Call) -> web.Response:
    composed = await call.request.app[BOARD].composition(call.rpc)
    host, label = call.query.get("host"), call.query.get("label")
    # The composition's serial is the version of everything the answer shows.
    tag = make_tag(call.user, "gpus", composed.serial, host, label)
    return conditional(call.request, tag, lambda: composed.answer(call.user, "gpus", host, label))


async def metric_series(call: Call) -> dict[str, Any]:
    query = call.query
    args: dict[str, Any] = {
        "host": query["host"],
        "metric": query["metric"],
        "start": query["start"].isoformat(),
        "end": query["end"].isoformat(),
        "step_s": query["step_s"],
    }
    if query.get("gpu_uuid"):
        args["gpu_uuid"] = query["gpu_uuid"]
    series: dict[str, Any] = await call.rpc(monitor_api.SERIES, args)
    return series


TAG = "hosts"
_FRESH = (
    f"Figures at most {MAX_AGE_S:g} s old; a reservation change shows as soon as the gateway "
    "hears of it."
)
ROUTES = (
    Route(
        "GET",
        "/hosts",
        list_hosts,
        Access.USER,
        "Every host now: reachability, figures, GPUs with processes and reservations",
        TAG,
        query=HostsQuery,
        response=HostsSchema,
        raw=True,
        description=_FRESH,
    ),
    Route(
        "GET",
        "/hosts/{name}",
        get_host,
        Access.USER,
        "One host now",
        TAG,
        params=HostPath,
        response=HostStateSchema,
        raw=True,
        description="404 `not_found` for a host Warden does not watch. " + _FRESH,
    ),
    Route(
        "GET",
        "/gpus",
        list_gpus,
        Access.USER,
        "Every GPU now: figures, processes, the reservation holding it and the next one",
        TAG,
        query=GpusQuery,
        response=GpusSchema,
        raw=True,
        description=_FRESH + " Private fields of other people's reservations are empty.",
        conditional=True,
    ),
    Route(
        "GET",
        "/metrics/series",
        metric_series,
        Access.USER,
        "A metric of a host or GPU over time, in buckets (min, avg, max, count)",
        TAG,
        query=SeriesQuery,
        response=SeriesSchema,
    ),
)
