"""The arguments of the reservations service's RPC methods (`services.reservations.api`)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.accounts.api import ActorArgs, FeedTokenArgs
from services.shared.gpu_labels import selector_problem

_Str = fields.String
_Time = fields.AwareDateTime

DAY_NAMES = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")


def _selector(terms: list[str]) -> None:
    """A label selector (`services.shared.gpu_labels`): refused with the first bad term."""
    problem = selector_problem(terms)
    if problem:
        raise ValidationError(problem)


_GPU_REF = _Str(validate=validate.Length(min=1, max=128))
_USERNAME = _Str(validate=validate.Length(min=1, max=64))


class CreateReservationArgs(ActorArgs):
    owner = _Str(
        validate=validate.Length(min=1, max=64),
        metadata={"description": "admins only: book for someone else"},
    )
    gpus = fields.List(
        _GPU_REF,
        required=True,
        validate=validate.Length(min=1, max=1024),
        metadata={"description": "GPU uuids (the REST API also takes host:index, e.g. dgx1:0)"},
    )
    start = _Time(required=True)
    end = _Time(required=True)
    title = _Str(required=True, validate=validate.Length(min=1, max=200))
    description = _Str(load_default="", validate=validate.Length(max=5000))
    guests = fields.List(_USERNAME, load_default=list)
    idempotency_key = _Str(
        load_default=None,
        validate=validate.Length(min=1, max=255),
        metadata={
            "description": "the client's key of this create (the REST API's Idempotency-Key "
            "header): the same create again with the same key, within 24 hours, is answered "
            "with the reservation it made"
        },
    )


class ReservationIdArgs(ActorArgs):
    id = fields.Integer(required=True, strict=True)


class UpdateReservationArgs(ReservationIdArgs):
    # What is left out stays as it is.
    title = _Str(validate=validate.Length(min=1, max=200))
    description = _Str(validate=validate.Length(max=5000))
    start = _Time()
    end = _Time()
    guests = fields.List(_USERNAME, metadata={"description": "replaces the list ([]: none)"})


class CancelReservationArgs(ReservationIdArgs):
    reason = _Str(load_default="", validate=validate.Length(max=500))


class GetReservationArgs(Schema):
    id = fields.Integer(required=True, strict=True)


class CalendarArgs(Schema):
    start = _Time(required=True)
    end = _Time(required=True)
    gpus = fields.List(_Str(), load_default=None)
    owner = _Str(load_default=None)
    include_cancelled = fields.Boolean(load_default=False)


class OverviewArgs(ActorArgs):
    start = _Time(required=True)
    end = _Time(required=True)
    slot_minutes = fields.Integer(load_default=30, validate=validate.OneOf((30, 60)))
    gpus = fields.List(_Str(), load_default=None)
    # compact: each GPU's runs as flat `cells` over the answer's `labels` (see OverviewSchema)
    format = _Str(load_default="full", validate=validate.OneOf(("full", "compact")))


class FindSlotArgs(ActorArgs):
    count = fields.Integer(required=True, validate=validate.Range(min=1, max=1024))
    duration_minutes = fields.Integer(required=True, validate=validate.Range(min=1))
    not_before = _Time(load_default=None)
    host = _Str(load_default=None)
    gpu_model = _Str(load_default=None)
    same_host = fields.Boolean(load_default=False)
    labels = fields.List(
        _Str(),
        load_default=list,
        validate=_selector,
        metadata={"description": "only GPUs carrying every label (model=A100-80GB, arch!=volta)"},
    )


class ActiveArgs(Schema):
    at = _Time(load_default=None)
    gpus = fields.List(_Str(), load_default=None)
    host = _Str(load_default=None)


class UseArgs(Schema):
    user = _Str(required=True, validate=validate.Length(min=1))
    gpus = fields.List(_Str(), required=True, validate=validate.Length(min=1, max=1024))
    start = _Time(required=True)
    end = _Time(required=True)

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        if data["end"] <= data["start"]:
            raise ValidationError("must be after start", "end")


class WindowArgs(Schema):
    days = fields.List(fields.Raw(), required=True, validate=validate.Length(min=1))
    start = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$"))
    end = _Str(required=True, validate=validate.Regexp(r"^([01]\d|2[0-3]):[0-5]\d$|^24:00$"))

    @validates_schema
    def known_days(self, data: dict[str, Any], **_: Any) -> None:
        for day in data["days"]:
            if not (
                (isinstance(day, int) and not isinstance(day, bool) and 0 <= day <= 6)
                or (isinstance(day, str) and day_index(day) is not None)
            ):
                raise ValidationError(
                    f"{day!r} is not a day: 0 (Monday) to 6 (Sunday), or mon..sun", "days"
                )


_Name = _Str(validate=validate.Length(min=1, max=255))
# Limits fit the 32-bit columns; times stay where datetime arithmetic cannot overflow.
_MAX_INT = 2**31 - 1
_SANE_TIME = validate.Range(
    min=datetime(1970, 1, 1, tzinfo=UTC), max=datetime(9000, 1, 1, tzinfo=UTC)
)


class IdlePolicyArgs(Schema):
    """When a reservation this rule grants is idle and is given back (minutes may be fractions)."""

    below_util_percent = fields.Float(
        required=True, validate=validate.Range(min=0, max=100, min_inclusive=False)
    )
    below_memory_mib = fields.Float(
        required=True, validate=validate.Range(min=0, max=1e9, min_inclusive=False)
    )
    for_minutes = fields.Float(
        required=True, validate=validate.Range(min=0, max=1e6, min_inclusive=False)
    )
    grace_minutes = fields.Float(
        required=True, validate=validate.Range(min=0, max=1e6, min_inclusive=False)
    )
    snooze_minutes = fields.Float(
        required=True, validate=validate.Range(min=0, max=1e6, min_inclusive=False)
    )


class RuleArgs(ActorArgs):
    name = _Str(required=True, validate=validate.Length(min=1, max=128))
    description = _Str(load_default="", validate=validate.Length(max=500))
    users = fields.List(_Name, load_default=list)
    groups = fields.List(_Name, load_default=list)
    all_gpus = fields.Boolean(load_default=False)
    hosts = fields.List(_Name, load_default=list)
    gpus = fields.List(_Name, load_default=list)
    labels = fields.List(
        _Str(),
        load_default=list,
        validate=_selector,
        metadata={
            "description": "only GPUs carrying every label (model=A100-80GB, arch!=volta); "
            "alone: every GPU that carries them"
        },
    )
    valid_from = _Time(load_default=None, validate=_SANE_TIME)
    valid_until = _Time(load_default=None, allow_none=True, validate=_SANE_TIME)
    windows = fields.List(fields.Nested(WindowArgs), load_default=list)
    timezone = _Str(load_default="UTC")
    max_gpus = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_duration_s = fields.Integer(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=_MAX_INT)
    )
    max_gpu_hours_per_week = fields.Float(
        load_default=None, allow_none=True, validate=validate.Range(min=0, max=1e9)
    )
    idle_policy = fields.Nested(
        IdlePolicyArgs,
        load_default=None,
        allow_none=True,
        metadata={"description": "null: reservations it grants are never released as idle"},
    )


class UpdateRuleArgs(RuleArgs):
    id = fields.Integer(required=True, strict=True)


class ListRulesArgs(Schema):
    # Given: an admin sees every rule, anyone else those that apply to them. Left out (other
    # services): every rule.
    actor = _Str(load_default=None, validate=validate.Length(min=1))


class RuleIdArgs(ActorArgs):
    id = fields.Integer(required=True, strict=True)


class IdleAnswerArgs(FeedTokenArgs):
    """An idle notice's link (its token) and the answer chosen on its page."""

    action = _Str(required=True, validate=validate.OneOf(("keep", "release")))


class IdleNoticesArgs(ActorArgs):
    everyone = fields.Boolean(load_default=False, metadata={"description": "admins: all users'"})


FULL_DAY_NAMES = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")


def day_index(name: str) -> int | None:
    """mon..sun or monday..sunday (any case); anything else is not a day."""
    text = name.lower()
    for index, (short, full) in enumerate(zip(DAY_NAMES, FULL_DAY_NAMES, strict=True)):
        if text in (short, full):
            return index
    return None
