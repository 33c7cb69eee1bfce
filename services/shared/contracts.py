"""Every message Warden sends, declared once: event types, their versions and data schemas.

Events travel in an envelope (DESIGN.md §3)::

    {"id": uuid, "type": "violation.opened", "version": 1,
     "occurred_at": ISO-8601 UTC, "source": "violations", "data": {...}}

`data` is always in wire form (JSON values; times as ISO-8601 strings with offset) and is
validated against the schema of its (type, version). A publisher that sends data not matching
its schema has a bug: `make_envelope` raises `ContractError`. A consumer validates what
arrives from the wire with `parse_envelope` and dead-letters what does not fit.

A compatible change (a new optional field) keeps the version: consumers ignore fields they do
not know. An incompatible change adds a new version beside the old one; consumers keep
working on the old one until they move.
"""

from __future__ import annotations

import json
import math
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, validate

from services.shared.errors import ContractError

# --- schemas of event data -------------------------------------------------------------------

_Str = fields.String
_NonEmpty = validate.Length(min=1)


class _Number(fields.Float):
    """A JSON number: a string such as "12" is refused, not converted (data is wire form)."""

    def _validated(self, value: Any) -> float:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.make_error("invalid")
        return super()._validated(value)


class _Integer(fields.Integer):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(strict=True, **kwargs)


class _Strict(Schema):
    class Meta:
        unknown = RAISE


class HostRef(_Strict):
    host = _Str(required=True, validate=_NonEmpty)


GPU_STATUSES = ("ok", "no_gpu", "no_nvidia_smi", "error")


class GpuDiscovered(HostRef):
    uuid = _Str(required=True, validate=_NonEmpty)
    index = _Integer(required=True, validate=validate.Range(min=0))
    name = _Str(required=True)
    memory_total_mib = _Number(required=True, allow_none=True)
    mig_parent_uuid = _Str(load_default=None, allow_none=True)


class GpuDisappeared(HostRef):
    uuid = _Str(required=True, validate=_NonEmpty)
    index = _Integer(required=True, allow_none=True)
    at = fields.AwareDateTime(required=True)


class GpuSample(_Strict):
    """One GPU at one tick. A figure the GPU does not report is null, never 0."""

    uuid = _Str(required=True, validate=_NonEmpty)
    index = _Integer(required=True)
    name = _Str(load_default=None, allow_none=True)
    utilization_gpu_percent = _Number(allow_none=True, load_default=None)
    utilization_memory_percent = _Number(allow_none=True, load_default=None)
    memory_used_mib = _Number(allow_none=True, load_default=None)
    memory_total_mib = _Number(allow_none=True, load_default=None)
    temperature_c = _Number(allow_none=True, load_default=None)
    power_draw_w = _Number(allow_none=True, load_default=None)
    power_limit_w = _Number(allow_none=True, load_default=None)
    fan_speed_percent = _Number(allow_none=True, load_default=None)
    clock_sm_mhz = _Number(allow_none=True, load_default=None)
    clock_memory_mhz = _Number(allow_none=True, load_default=None)


class HostSampled(HostRef):
    sampled_at = fields.AwareDateTime(required=True)
    cpu_percent = _Number(allow_none=True, load_default=None)
    load_1m = _Number(allow_none=True, load_default=None)
    load_5m = _Number(allow_none=True, load_default=None)
    load_15m = _Number(allow_none=True, load_default=None)
    memory_used_mib = _Number(allow_none=True, load_default=None)
    memory_total_mib = _Number(allow_none=True, load_default=None)
    # ok | no_gpu | no_nvidia_smi | error: why `gpus` may be empty.
    gpu_status = _Str(load_default="ok", validate=validate.OneOf(GPU_STATUSES))
    gpu_error = _Str(allow_none=True, load_default=None)
    gpus = fields.List(fields.Nested(GpuSample), required=True)


class GpuProcess(_Strict):
    gpu_uuid = _Str(required=True, validate=_NonEmpty)
    pid = _Integer(required=True, validate=validate.Range(min=0))
    user = _Str(required=True, allow_none=True)
    command = _Str(required=True)
    used_memory_mib = _Number(allow_none=True, load_default=None)
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ProcessesObserved(HostRef):
    """The whole truth about GPU processes on one host at one time (not a delta)."""

    observed_at = fields.AwareDateTime(required=True)
    processes = fields.List(fields.Nested(GpuProcess), required=True)


class HostUnreachable(HostRef):
    since = fields.AwareDateTime(required=True)
    reason = _Str(required=True)


class HostRecovered(HostRef):
    at = fields.AwareDateTime(required=True)
    down_since = fields.AwareDateTime(allow_none=True, load_default=None)


class GpuRef(_Strict):
    uuid = _Str(required=True, validate=_NonEmpty)
    host = _Str(required=True)
    index = _Integer(required=True, allow_none=True)


RESERVATION_STATUSES = ("active", "cancelled")


class ReservationData(_Strict):
    """A reservation as every reservation.* event carries it (its state after the change)."""

    id = _Integer(required=True)
    owner = _Str(required=True, validate=_NonEmpty)
    gpus = fields.List(fields.Nested(GpuRef), required=True)
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)
    title = _Str(required=True)
    description = _Str(load_default="")
    status = _Str(required=True, validate=validate.OneOf(RESERVATION_STATUSES))
    created_by = _Str(required=True)
    cancelled_at = fields.AwareDateTime(allow_none=True, load_default=None)
    cancelled_by = _Str(allow_none=True, load_default=None)
    cancel_reason = _Str(allow_none=True, load_default=None)
    # Users who may use the reserved GPUs too (a shared booking): never violators.
    guests = fields.List(_Str(), load_default=list)
    # When it last changed: copies built from events and answers keep the newest.
    updated_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ReservationUpdated(ReservationData):
    # Names of the fields that changed: title, description, start, end, status (restored).
    changed = fields.List(_Str(), required=True)
    actor = _Str(required=True)


class ReservationCancelled(ReservationData):
    # True when an access change cancelled it (it is restored if allowed and free again).
    by_rules = fields.Boolean(required=True)


class UsageSummary(_Strict):
    samples = _Integer(required=True)
    avg_utilization_percent = _Number(allow_none=True, load_default=None)
    peak_utilization_percent = _Number(allow_none=True, load_default=None)
    avg_memory_used_mib = _Number(allow_none=True, load_default=None)
    peak_memory_used_mib = _Number(allow_none=True, load_default=None)
    idle_share = _Number(allow_none=True, load_default=None)
    first_sample_at = fields.AwareDateTime(allow_none=True, load_default=None)
    last_sample_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ReservationEnded(ReservationData):
    usage = fields.Nested(UsageSummary, allow_none=True, load_default=None)


class AccessChanged(_Strict):
    """Rules or group memberships changed; future reservations were re-checked."""

    cause = _Str(required=True)  # rule.created | rule.updated | rule.deleted | group.* | user.*
    rule_id = _Integer(allow_none=True, load_default=None)
    group = _Str(allow_none=True, load_default=None)
    username = _Str(allow_none=True, load_default=None)
    actor = _Str(required=True)
    cancelled = fields.List(_Integer(), required=True)
    restored = fields.List(_Integer(), required=True)


class UserData(_Strict):
    """A user account; never the password or its hash."""

    username = _Str(required=True, validate=_NonEmpty)
    email = _Str(required=True)
    roles = fields.List(_Str(), required=True)
    groups = fields.List(_Str(), required=True)


class UserUpdated(UserData):
    changed = fields.List(_Str(), required=True)


class OffendingProcess(_Strict):
    pid = _Integer(required=True, validate=validate.Range(min=0))
    command = _Str(required=True)
    # From the host's clock: a handler compares it before signalling, so a pid the kernel
    # gave to another process meanwhile is never killed.
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)
    used_memory_mib = _Number(allow_none=True, load_default=None)


VIOLATION_MODES = ("reservations", "strict")


class ViolationContext(_Strict):
    """Full context of an incident, carried by every violation.* event."""

    incident_id = _Str(required=True, validate=_NonEmpty)
    mode = _Str(load_default="reservations", validate=validate.OneOf(VIOLATION_MODES))
    host = _Str(required=True, validate=_NonEmpty)
    gpu_uuid = _Str(required=True)
    gpu_index = _Integer(required=True, allow_none=True)
    offender = _Str(required=True)
    pids = fields.List(_Integer(), required=True)
    commands = fields.List(_Str(), required=True)
    reservation_id = _Integer(allow_none=True, load_default=None)
    owner = _Str(allow_none=True, load_default=None)
    reservation_start = fields.AwareDateTime(allow_none=True, load_default=None)
    reservation_end = fields.AwareDateTime(allow_none=True, load_default=None)
    since = fields.AwareDateTime(required=True)
    processes = fields.List(fields.Nested(OffendingProcess), load_default=list)


class UpcomingStep(_Strict):
    step = _Str(required=True)
    action = _Str(required=True)
    at = fields.AwareDateTime(required=True)


class ViolationEscalated(ViolationContext):
    step = _Str(required=True)  # as configured: "60s email offender+admins"
    step_index = _Integer(required=True, validate=validate.Range(min=0))
    action = _Str(load_default="")  # terminal | email | webhook | terminate | kill | yours
    recipients = fields.List(_Str(), load_default=list)  # offender | owner | admins
    after_s = _Number(load_default=0.0)
    # What comes after this step unless the incident ends first (None: nothing more).
    next_step = _Str(allow_none=True, load_default=None)
    next_at = fields.AwareDateTime(allow_none=True, load_default=None)
    # Every later step with its time (the first is next_step): notices say what is coming.
    upcoming = fields.List(fields.Nested(UpcomingStep), load_default=list)


class ViolationResolved(ViolationContext):
    resolved_at = fields.AwareDateTime(required=True)
    reason = _Str(required=True)


JOB_STATUSES = (
    "pending",
    "scheduled",
    "queued",
    "starting",
    "running",
    "stopping",
    "succeeded",
    "failed",
    "stopped",
    "lost",
)
TASK_STATUSES = ("pending", "starting", "running", "succeeded", "failed", "stopped", "lost")


class TaskData(_Strict):
    """A task as job events carry it: where and how it runs, never its command or environment
    (they may hold secrets; the owner reads them by RPC)."""

    index = _Integer(required=True, validate=validate.Range(min=0))
    host = _Str(required=True, allow_none=True)  # None: a queued task not placed yet
    gpus = fields.List(_Str(), required=True)
    gpu_count = _Integer(allow_none=True, load_default=None)
    status = _Str(required=True, validate=validate.OneOf(TASK_STATUSES))
    session = _Str(required=True)  # screen/tmux session name on the host
    exit_code = _Integer(allow_none=True, load_default=None)
    reason = _Str(allow_none=True, load_default=None)
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)
    ended_at = fields.AwareDateTime(allow_none=True, load_default=None)


class JobData(_Strict):
    """A job after the change (every job.* event)."""

    id = _Integer(required=True)
    owner = _Str(required=True, validate=_NonEmpty)
    name = _Str(required=True)
    status = _Str(required=True, validate=validate.OneOf(JOB_STATUSES))
    queued = fields.Boolean(required=True)
    start_at = fields.AwareDateTime(allow_none=True, load_default=None)
    stop_at = fields.AwareDateTime(allow_none=True, load_default=None)
    reservation_id = _Integer(allow_none=True, load_default=None)
    max_runtime_s = _Number(allow_none=True, load_default=None)
    template = _Str(allow_none=True, load_default=None)  # the template's kind
    waiting_reason = _Str(allow_none=True, load_default=None)  # why a queued job waits
    tasks = fields.List(fields.Nested(TaskData), required=True)
    created_at = fields.AwareDateTime(required=True)
    updated_at = fields.AwareDateTime(required=True)


class JobChanged(JobData):
    actor = _Str(required=True)
    changed = fields.List(_Str(), load_default=list)  # job.updated: the fields edited


class JobStatusChanged(JobData):
    previous_status = _Str(required=True, validate=validate.OneOf(JOB_STATUSES))


class TaskStatusChanged(_Strict):
    job_id = _Integer(required=True)
    owner = _Str(required=True, validate=_NonEmpty)
    task = fields.Nested(TaskData, required=True)
    previous_status = _Str(required=True, validate=validate.OneOf(TASK_STATUSES))
    at = fields.AwareDateTime(required=True)


# --- a fast path for validation ----------------------------------------------------------------
# Every event is validated when published and again when it arrives from the wire, so the
# common case (valid data) is checked by plain functions compiled once per schema from its
# fields. They are conservative: when one says "no" (or a field kind is not compiled), the
# marshmallow schema decides and writes the error messages. A test checks both agree.

Check = Callable[[Any], bool]


def _compile_field(declared: fields.Field) -> Check | None:
    """A check of one present value of `declared`, or None when it cannot be compiled."""
    value_check: Check | None
    if isinstance(declared, fields.Nested):
        value_check = _compile_schema(declared.schema, strict=True)
    elif isinstance(declared, fields.List):
        inner = _compile_field(declared.inner)
        if inner is None:
            return None
        value_check = lambda v, inner=inner: isinstance(v, list) and all(map(inner, v))  # noqa: E731
    elif isinstance(declared, fields.AwareDateTime):
        value_check = _is_aware_iso
    elif isinstance(declared, _Integer):
        value_check = lambda v: type(v) is int  # noqa: E731
    elif isinstance(declared, _Number):
        value_check = lambda v: type(v) is int or (type(v) is float and math.isfinite(v))  # noqa: E731
    elif type(declared) is fields.String:
        value_check = lambda v: type(v) is str  # noqa: E731
    elif type(declared) is fields.Boolean:
        value_check = lambda v: type(v) is bool  # noqa: E731
    else:
        return None
    if value_check is None:
        return None
    checks = [value_check]
    for validator in declared.validators:
        compiled = _compile_validator(validator)
        if compiled is None:
            return None
        checks.append(compiled)
    allow_none = declared.allow_none
    return lambda v: (
        (v is None and allow_none) or (v is not None and all(check(v) for check in checks))
    )


def _compile_validator(validator: Any) -> Check | None:
    if type(validator) is validate.Length and validator.equal is None:
        low, high = validator.min, validator.max
        return lambda v: (low is None or len(v) >= low) and (high is None or len(v) <= high)
    if type(validator) is validate.OneOf:
        choices = tuple(validator.choices)
        return lambda v: v in choices
    if type(validator) is validate.Range and validator.min_inclusive and validator.max_inclusive:
        low, high = validator.min, validator.max
        return lambda v: (low is None or v >= low) and (high is None or v <= high)
    return None


def _is_aware_iso(value: Any) -> bool:
    if type(value) is not str:
        return False
    try:
        return datetime.fromisoformat(value).utcoffset() is not None
    except ValueError:
        return False


def _compile_schema(schema: Any, *, strict: bool) -> Check | None:
    if not isinstance(schema, Schema):
        return None
    compiled: list[tuple[str, bool, Check]] = []
    for name, declared in schema.fields.items():
        check = _compile_field(declared)
        if check is None:
            return None
        compiled.append((name, declared.required, check))
    known = frozenset(schema.fields)

    def check_object(data: Any) -> bool:
        if not isinstance(data, dict) or (strict and not known.issuperset(data)):
            return False
        for name, required, check in compiled:
            if name in data:
                if not check(data[name]):
                    return False
            elif required:
                return False
        return True

    return check_object


def _compile_nested_lenient(schema: Schema) -> Check | None:
    """The consumer's check: unknown keys are ignored at every depth."""
    strict_check = _compile_schema(schema, strict=True)
    if strict_check is None:
        return None
    return lambda data: strict_check(_known_fields_only(schema, data))


def _known_fields_only(schema: Schema, data: Any) -> Any:
    """`data` without the keys `schema` does not declare, recursively through nested objects."""
    if not isinstance(data, Mapping):
        return data
    kept: dict[str, Any] = {}
    for key, value in data.items():
        declared = schema.fields.get(key)
        if declared is None:
            continue
        inner = declared.inner if isinstance(declared, fields.List) else declared
        if isinstance(inner, fields.Nested) and isinstance(inner.schema, Schema):
            if isinstance(declared, fields.List) and isinstance(value, list):
                value = [_known_fields_only(inner.schema, item) for item in value]
            else:
                value = _known_fields_only(inner.schema, value)
        kept[key] = value
    return kept


# --- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class EventType:
    name: str
    version: int
    source: str
    schema: type[Schema]
    description: str
    _schema: Schema = field(init=False, repr=False, compare=False)
    _fast_strict: Check | None = field(init=False, repr=False, compare=False)
    _fast_lenient: Check | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        schema = self.schema()
        object.__setattr__(self, "_schema", schema)
        object.__setattr__(self, "_fast_strict", _compile_schema(schema, strict=True))
        object.__setattr__(self, "_fast_lenient", _compile_nested_lenient(schema))

    def errors(self, data: Any, *, strict: bool) -> dict[str, Any]:
        """Validation errors of `data` (empty when it fits the schema).

        Not strict (a consumer reading the wire): fields it does not know are ignored at every
        depth, since a compatible change may add optional fields anywhere.
        """
        if not isinstance(data, Mapping):
            return {"_schema": ["data must be an object"]}
        fast = self._fast_strict if strict else self._fast_lenient
        if fast is not None and fast(data):
            return {}
        try:
            self._schema.load(data if strict else _known_fields_only(self._schema, data))
        except ValidationError as err:
            return err.normalized_messages()
        return {}


EVENT_TYPES: tuple[EventType, ...] = (
    EventType(
        "gpu.discovered",
        1,
        "monitor",
        GpuDiscovered,
        "A GPU was seen for the first time, or its identity (index, name, memory) changed.",
    ),
    EventType(
        "gpu.disappeared",
        1,
        "monitor",
        GpuDisappeared,
        "A GPU seen before is missing from its host's reading (the host itself answered).",
    ),
    EventType(
        "host.sampled",
        1,
        "monitor",
        HostSampled,
        "CPU and every GPU's figures of one host at one tick.",
    ),
    EventType(
        "processes.observed",
        1,
        "monitor",
        ProcessesObserved,
        "The complete list of GPU processes of one host at one tick.",
    ),
    EventType(
        "host.unreachable",
        1,
        "monitor",
        HostUnreachable,
        "A host stopped answering polls (sent once per outage).",
    ),
    EventType(
        "host.recovered",
        1,
        "monitor",
        HostRecovered,
        "A host that was unreachable answers again (sent once per outage).",
    ),
    EventType(
        "reservation.created",
        1,
        "reservations",
        ReservationData,
        "A reservation was made (all its GPUs at once).",
    ),
    EventType(
        "reservation.updated",
        1,
        "reservations",
        ReservationUpdated,
        "A reservation's title, description or times changed, or it was restored.",
    ),
    EventType(
        "reservation.cancelled",
        1,
        "reservations",
        ReservationCancelled,
        "A reservation was cancelled by a person or by an access change.",
    ),
    EventType(
        "reservation.started",
        1,
        "reservations",
        ReservationData,
        "A reservation's start time came (sent late after a restart, never lost).",
    ),
    EventType(
        "reservation.ended",
        1,
        "reservations",
        ReservationEnded,
        "A reservation's end time came, or it was ended early; carries its final usage.",
    ),
    EventType(
        "access.changed",
        1,
        "reservations",
        AccessChanged,
        "Access rules or group memberships changed; lists reservations cancelled or restored.",
    ),
    EventType(
        "user.created",
        1,
        "reservations",
        UserData,
        "An account was created.",
    ),
    EventType(
        "user.updated",
        1,
        "reservations",
        UserUpdated,
        "An account's e-mail, password, roles or groups changed.",
    ),
    EventType(
        "job.created",
        1,
        "jobs",
        JobChanged,
        "A job was defined (it starts later: now, at a time, in a reservation or from the queue).",
    ),
    EventType(
        "job.updated",
        1,
        "jobs",
        JobChanged,
        "A job's definition or schedule changed, or it was put in or taken out of the queue.",
    ),
    EventType(
        "job.deleted",
        1,
        "jobs",
        JobChanged,
        "A job that was not running was deleted.",
    ),
    EventType(
        "job.status_changed",
        1,
        "jobs",
        JobStatusChanged,
        "A job's status (derived from its tasks') changed.",
    ),
    EventType(
        "task.status_changed",
        1,
        "jobs",
        TaskStatusChanged,
        "A task started, is running, ended (with its exit code), was stopped or lost its host.",
    ),
    EventType(
        "violation.opened",
        1,
        "violations",
        ViolationContext,
        "Someone uses a GPU another person reserved: a new incident.",
    ),
    EventType(
        "violation.escalated",
        1,
        "violations",
        ViolationEscalated,
        "An escalation step of an open incident is due.",
    ),
    EventType(
        "violation.resolved",
        1,
        "violations",
        ViolationResolved,
        "An incident ended: no offending process left, or the reservation ended.",
    ),
)

_BY_KEY: dict[tuple[str, int], EventType] = {(t.name, t.version): t for t in EVENT_TYPES}
_LATEST: dict[str, EventType] = {}
for _t in sorted(EVENT_TYPES, key=lambda t: t.version):
    _LATEST[_t.name] = _t


def event_type(name: str, version: int | None = None) -> EventType:
    """The declared type `name` at `version` (latest when omitted); ContractError if unknown."""
    found = _LATEST.get(name) if version is None else _BY_KEY.get((name, version))
    if found is None:
        known = f"version {version} of " if version is not None and name in _LATEST else ""
        raise ContractError(
            f"unknown event type {known}{name!r}", {"type": name, "version": version}
        )
    return found


# --- the envelope ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Envelope:
    id: str
    type: str
    version: int
    occurred_at: str
    source: str
    data: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "type": self.type,
            "version": self.version,
            "occurred_at": self.occurred_at,
            "source": self.source,
            "data": self.data,
        }

    def to_json(self) -> bytes:
        return json.dumps(self.to_dict(), separators=(",", ":")).encode()


def utc_now_iso() -> str:
    return datetime.now(UTC).isoformat()


def make_envelope(
    type_name: str,
    data: Mapping[str, Any],
    *,
    version: int | None = None,
    source: str | None = None,
) -> Envelope:
    """Build an envelope for publishing; invalid data is a programming error (ContractError)."""
    etype = event_type(type_name, version)
    if source is not None and source != etype.source:
        raise ContractError(
            f"{type_name!r} is published by {etype.source!r}, not {source!r}",
            {"type": type_name, "source": source},
        )
    errors = etype.errors(data, strict=True)
    if errors:
        raise ContractError(
            f"data of {type_name!r} v{etype.version} does not match its schema",
            {"type": type_name, "version": etype.version, "errors": errors},
        )
    try:
        json.dumps(data)
    except (TypeError, ValueError) as err:
        raise ContractError(
            f"data of {type_name!r} must be JSON values (times as ISO-8601 strings): {err}",
            {"type": type_name},
        ) from err
    return Envelope(
        id=str(uuid.uuid4()),
        type=etype.name,
        version=etype.version,
        occurred_at=utc_now_iso(),
        source=etype.source,
        data=dict(data),
    )


_ENVELOPE_KEYS = ("id", "type", "version", "occurred_at", "source", "data")


def parse_envelope(body: bytes | str | Mapping[str, Any]) -> Envelope:
    """Validate a message from the wire; ContractError says what is wrong with it."""
    if isinstance(body, bytes | str):
        try:
            raw = json.loads(body)
        except (ValueError, UnicodeDecodeError) as err:
            raise ContractError(f"body is not JSON: {err}") from err
    else:
        raw = body
    if not isinstance(raw, Mapping):
        raise ContractError("envelope must be a JSON object")
    missing = [k for k in _ENVELOPE_KEYS if k not in raw]
    if missing:
        raise ContractError(f"envelope lacks {', '.join(missing)}", {"missing": missing})
    name, version = raw["type"], raw["version"]
    if not isinstance(name, str) or not isinstance(version, int) or isinstance(version, bool):
        raise ContractError("envelope type must be a string and version an integer")
    etype = event_type(name, version)
    errors = etype.errors(raw["data"], strict=False)
    if errors:
        raise ContractError(
            f"data of {name!r} v{version} does not match its schema",
            {"type": name, "version": version, "errors": errors},
        )
    return Envelope(
        id=str(raw["id"]),
        type=name,
        version=version,
        occurred_at=str(raw["occurred_at"]),
        source=str(raw["source"]),
        data=dict(raw["data"]),
    )


# --- RPC names ---------------------------------------------------------------------------------
# RPC methods are verbs named `<service>.<method>`; every service answers `health`.

HEALTH_METHOD = "health"
