"""The answers of the reservations service's RPC methods (`services.reservations.api`)."""

from __future__ import annotations

from marshmallow import fields

from services.accounts.api import AccessChangeSchema
from services.shared.rpc import Answer

_Str = fields.String
_Time = fields.AwareDateTime


class RuleWindowSchema(Answer):
    days = fields.List(fields.Integer(), required=True, metadata={"description": "0 = Monday"})
    start = _Str(required=True, metadata={"example": "08:00"})
    end = _Str(required=True, metadata={"example": "18:00"})


class IdlePolicySchema(Answer):
    below_util_percent = fields.Float(required=True)
    below_memory_mib = fields.Float(required=True)
    for_minutes = fields.Float(required=True)
    grace_minutes = fields.Float(required=True)
    snooze_minutes = fields.Float(required=True)


class RuleSchema(Answer):
    id = fields.Integer(required=True)
    name = _Str(required=True)
    description = _Str(required=True)
    users = fields.List(_Str(), required=True)
    groups = fields.List(_Str(), required=True)
    all_gpus = fields.Boolean(required=True)
    hosts = fields.List(_Str(), required=True)
    gpus = fields.List(_Str(), required=True)
    labels = fields.List(_Str(), required=True)
    valid_from = _Time(required=True)
    valid_until = _Time(required=True, allow_none=True)
    windows = fields.List(fields.Nested(RuleWindowSchema), required=True)
    timezone = _Str(required=True)
    max_gpus = fields.Integer(required=True, allow_none=True)
    max_duration_s = fields.Integer(required=True, allow_none=True)
    max_gpu_hours_per_week = fields.Float(required=True, allow_none=True)
    idle_policy = fields.Nested(IdlePolicySchema, required=True, allow_none=True)
    created_by = _Str()
    created_at = _Time()
    updated_at = _Time()


class RuleChangedSchema(RuleSchema, AccessChangeSchema):
    """A rule as created or replaced, with the future reservations that change cancelled or
    restored."""


class RuleDeletedSchema(AccessChangeSchema):
    id = fields.Integer(required=True)


class GpuRefSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    name = _Str()


class UsageSchema(Answer):
    samples = fields.Integer(required=True)
    avg_utilization_percent = fields.Float(allow_none=True)
    peak_utilization_percent = fields.Float(allow_none=True)
    avg_memory_used_mib = fields.Float(allow_none=True)
    peak_memory_used_mib = fields.Float(allow_none=True)
    idle_share = fields.Float(allow_none=True)


class ReservationSchema(Answer):
    id = fields.Integer(required=True)
    owner = _Str(required=True)
    gpus = fields.List(fields.Nested(GpuRefSchema), required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True)
    description = _Str(
        required=True, metadata={"description": "empty unless you own, share or administer it"}
    )
    status = _Str(required=True, metadata={"description": "active, cancelled or ended"})
    guests = fields.List(_Str(), required=True)
    created_by = _Str(required=True)
    cancelled_at = _Time(allow_none=True)
    cancelled_by = _Str(allow_none=True)
    cancel_reason = _Str(allow_none=True)
    created_at = _Time()
    updated_at = _Time()
    usage = fields.Nested(UsageSchema, allow_none=True)


class WarningProcessSchema(Answer):
    pid = fields.Integer(required=True)
    user = _Str(required=True, allow_none=True, metadata={"description": "null: unknown"})
    command = _Str(required=True)


class BookingWarningSchema(Answer):
    """A GPU of a reservation that starts now on which someone else runs processes now."""

    gpu_uuid = _Str(required=True)
    host = _Str(required=True)
    gpu_index = fields.Integer(required=True, allow_none=True)
    processes = fields.List(fields.Nested(WarningProcessSchema), required=True)
    message = _Str(required=True, metadata={"description": "who and which processes, in words"})


class CreatedReservationSchema(ReservationSchema):
    """The reservation made, and what it may run into now."""

    warnings = fields.List(
        fields.Nested(BookingWarningSchema),
        required=True,
        metadata={
            "description": "GPUs in use now by others (not the owner or a guest), for a "
            "reservation that starts now (within a minute or a poll interval); empty otherwise. "
            "The reservation is made all the same."
        },
    )


class CalendarItemSchema(Answer):
    id = fields.Integer(required=True)
    owner = _Str(required=True)
    gpus = fields.List(fields.Nested(GpuRefSchema), required=True)
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True)
    description = _Str(required=True)
    status = _Str(required=True)
    guests = fields.List(_Str(), required=True)
    created_by = _Str(required=True)
    cancelled_at = _Time(allow_none=True)
    cancelled_by = _Str(allow_none=True)
    cancel_reason = _Str(allow_none=True)
    updated_at = _Time(allow_none=True)


class RunSchema(Answer):
    first = fields.Integer(required=True, metadata={"description": "its first slot (from 0)"})
    count = fields.Integer(required=True, metadata={"description": "how many slots it spans"})
    state = _Str(required=True, metadata={"description": "free, mine, taken or not_allowed"})
    owner = _Str(allow_none=True, metadata={"description": "taken: whose"})
    reservation_id = fields.Integer(
        allow_none=True, metadata={"description": "taken: which (the earliest-starting one)"}
    )


class OverviewGpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    runs = fields.List(
        fields.Nested(RunSchema), metadata={"description": "format=full (the default)"}
    )
    cells = fields.List(
        fields.Integer(),
        metadata={
            "description": "format=compact: the runs as [label, count, label, count, ...]; "
            "label indexes the answer's `labels`, the first run starts at slot 0"
        },
    )


class OverviewHostSchema(Answer):
    host = _Str(required=True)
    gpus = fields.List(fields.Nested(OverviewGpuSchema), required=True)


class OverviewSchema(Answer):
    start = _Time(required=True)
    end = _Time(required=True)
    slot_minutes = fields.Float(required=True)
    slots = fields.Integer(required=True)
    hosts = fields.List(fields.Nested(OverviewHostSchema), required=True)
    labels = fields.List(
        fields.List(fields.Raw()),
        metadata={
            "description": "format=compact: [state, owner, reservation_id] of each label; "
            "0 free, 1 mine, 2 not_allowed, then one per reservation taken by others"
        },
    )


class SlotGpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    labels = fields.List(
        _Str(),
        metadata={"description": "labels from the hardware: model=, memory=, arch="},
    )


class SlotSchema(Answer):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(fields.Nested(SlotGpuSchema), required=True)
    why = _Str(
        required=True,
        allow_none=True,
        metadata={
            "description": 'why these GPUs, in words: "4 GPUs joined by NVLink on gpu-01", '
            '"2 GPUs on gpu-02, across NUMA nodes", "8 GPUs on 2 hosts (...): no host has 8 '
            'free"'
        },
    )


class GpuSchema(Answer):
    uuid = _Str(required=True)
    host = _Str(required=True)
    index = fields.Integer(required=True, allow_none=True)
    name = _Str(required=True)
    memory_total_mib = fields.Integer(allow_none=True)
    present = fields.Boolean(required=True)
    labels = fields.List(
        _Str(),
        metadata={"description": "labels from the hardware: model=, memory=, arch="},
    )
    mig_parent_uuid = _Str(
        allow_none=True,
        metadata={"description": "a MIG instance: the uuid of the GPU it is part of"},
    )
    health = _Str(
        required=True,
        metadata={"description": "ok, degraded or failed (a failed GPU takes no new booking)"},
    )
    health_reason = _Str(required=True, allow_none=True)


class IdleNoticeSchema(Answer):
    """A reservation whose owner was told it is idle and has not answered yet."""

    id = fields.Integer(required=True)
    owner = _Str(required=True)
    title = _Str(required=True)
    end = _Time(required=True)
    idle_since = _Time(required=True, allow_none=True)
    notified_at = _Time(required=True, allow_none=True)
    release_at = _Time(
        required=True, allow_none=True, metadata={"description": "released then, unless kept"}
    )


class IdleLinkSchema(Answer):
    """What an idle notice's link is about (nothing is done by reading it)."""

    id = fields.Integer(required=True)
    title = _Str(required=True)
    owner = _Str(required=True)
    pending = fields.Boolean(
        required=True, metadata={"description": "false: used, answered, or its notice is over"}
    )
    release_at = _Time(required=True, allow_none=True)


class IdleAnswerSchema(Answer):
    id = fields.Integer(required=True)
    action = _Str(required=True, metadata={"description": "keep | release"})
    snoozed_until = _Time(allow_none=True, load_default=None)
    released_at = _Time(allow_none=True, load_default=None)


class IdleStatsSchema(Answer):
    """How a user answered idle notices."""

    user = _Str(required=True)
    notices = fields.Integer(required=True)
    kept = fields.Integer(required=True, metadata={"description": '"I still need it"'})
    released_idle = fields.Integer(required=True, metadata={"description": "no answer in time"})
    released_by_owner = fields.Integer(required=True, metadata={"description": '"release now"'})
