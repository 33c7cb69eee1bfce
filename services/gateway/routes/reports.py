"""Usage reports: GPU-hours reserved, used, idle and used without a reservation, violations and
jobs, per user, group, host or GPU model over a period (`services/gateway/usage_report.py`
groups what each service adds up). Admins see everyone; a user sees their own figures only.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from aiohttp import web
from marshmallow import Schema, ValidationError, fields, validate, validates_schema

from services.gateway.routing import Access, Call, Route
from services.gateway.usage_report import COLUMNS, GROUPINGS, compose, to_csv
from services.jobs import api as jobs_api
from services.reservations import api as reservations_api
from services.shared.errors import Forbidden
from services.shared.rpc import Answer
from services.violations import api as violations_api

MAX_PERIOD = timedelta(days=366)
DEFAULT_PERIOD = timedelta(days=30)


class Moment(fields.Field):
    """A date (`2026-11-01`: midnight UTC) or an ISO-8601 time (UTC when it has no offset)."""

    def _deserialize(self, value: Any, attr: str | None, data: Any, **kwargs: Any) -> datetime:
        if not isinstance(value, str) or len(value) > 40:
            raise ValidationError("a date (2026-11-01) or an ISO-8601 time")
        try:
            if len(value) == 10:
                return datetime.combine(date.fromisoformat(value), time(), UTC)
            found = datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError as err:
            raise ValidationError("a date (2026-11-01) or an ISO-8601 time") from err
        return found if found.utcoffset() is not None else found.replace(tzinfo=UTC)


_START = "a date (midnight UTC) or ISO-8601 time; default: 30 days before `end`"


class ReportQuery(Schema):
    start = Moment(metadata={"description": _START, "type": "string"})
    end = Moment(
        metadata={
            "description": "exclusive; a date or ISO-8601 time; default: now",
            "type": "string",
        }
    )
    by = fields.String(load_default="user", validate=validate.OneOf(GROUPINGS))
    user = fields.String(
        validate=validate.Length(min=1, max=64),
        metadata={"description": "only this user's figures (others than yourself: admins only)"},
    )
    format = fields.String(load_default="json", validate=validate.OneOf(("json", "csv")))

    @validates_schema
    def period(self, data: dict[str, Any], **_: Any) -> None:
        start, end = data.get("start"), data.get("end")
        if start is not None and end is not None:
            if end <= start:
                raise ValidationError("must be after start", "end")
            if end - start > MAX_PERIOD:
                raise ValidationError(f"the period may be at most {MAX_PERIOD.days} days", "end")


class UsageRowSchema(Answer):
    key = fields.String(required=True, metadata={"description": "the user, group, host or model"})
    reserved_gpu_hours = fields.Float(required=True)
    used_gpu_hours = fields.Float(required=True)
    idle_gpu_hours = fields.Float(required=True)
    idle_share = fields.Float(
        required=True, allow_none=True, metadata={"description": "null: nothing measured"}
    )
    unreserved_gpu_hours = fields.Float(required=True)
    violations_caused = fields.Integer(required=True)
    violations_suffered = fields.Integer(required=True)
    jobs = fields.Integer(required=True)


class UsageReportSchema(Answer):
    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True, metadata={"description": "at most now"})
    by = fields.String(required=True)
    user = fields.String(
        required=True, allow_none=True, metadata={"description": "whose figures; null: everyone"}
    )
    columns = fields.List(fields.String(), required=True)
    rows = fields.List(fields.Nested(UsageRowSchema), required=True)
    totals = fields.Nested(UsageRowSchema, required=True)


def _whose(call: Call) -> str | None:
    asked = call.query.get("user")
    if call.user.is_admin:
        return asked
    if asked not in (None, call.user.username):
        raise Forbidden("only admins see other people's usage")
    return call.user.username


async def _report(call: Call) -> dict[str, Any]:
    query = call.query
    whose = _whose(call)
    now = datetime.now(UTC)
    end = min(query.get("end") or now, now)
    start = query.get("start") or (end - DEFAULT_PERIOD)
    if query.get("end") is None and query.get("start") is not None:
        end = min(start + MAX_PERIOD, now)
    facts: list[dict[str, Any]] = []
    gpus: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    if start < end:  # a period in the future has nothing yet
        period = {"start": start.isoformat(), "end": end.isoformat()}
        booked, incidents, ran = await asyncio.gather(
            call.rpc(reservations_api.USAGE_REPORT, period),
            call.rpc(violations_api.USAGE_REPORT, period),
            call.rpc(jobs_api.USAGE_REPORT, period),
        )
        facts = [*booked["facts"], *incidents["facts"], *ran["facts"]]
        gpus, groups = booked["gpus"], booked["groups"]
    report = compose(facts, gpus, groups, query["by"], whose)
    return {
        "start": start.isoformat(),
        "end": max(start, end).isoformat(),
        "by": query["by"],
        "user": whose,
        "columns": list(COLUMNS),
        **report,
    }


def _csv(report: dict[str, Any]) -> web.Response:
    name = f"usage-{report['by']}-{report['start'][:10]}-{report['end'][:10]}.csv"
    return web.Response(
        text=to_csv(report, report["by"]),
        content_type="text/csv",
        headers={"Content-Disposition": f'attachment; filename="{name}"'},
    )


async def usage_report(call: Call) -> web.Response:
    report = await _report(call)
    if call.query["format"] == "csv":
        return _csv(report)
    return web.json_response(report)


async def usage_report_csv(call: Call) -> web.Response:
    return _csv(await _report(call))


_ACCESS = (
    "Admins see everyone (or one user with `user=`); anyone else sees only their own figures "
    "(403 `forbidden` for `user=` someone else). 422 when `end` is not after `start` or the "
    "period is longer than 366 days. The period stops at now. Columns: see the documentation's "
    '"Usage reports" (docs/admins/usage-reports.md).'
)
TAG = "reports"
ROUTES = (
    Route(
        "GET",
        "/reports/usage",
        usage_report,
        Access.USER,
        "GPU usage per user, group, host or GPU model over a period (JSON, or CSV)",
        TAG,
        query=ReportQuery,
        response=UsageReportSchema,
        raw=True,
        description=_ACCESS + " `format=csv` answers as `/reports/usage.csv` does.",
    ),
    Route(
        "GET",
        "/reports/usage.csv",
        usage_report_csv,
        Access.USER,
        "The usage report as CSV (a header row, the rows, then a `total` row)",
        TAG,
        query=ReportQuery,
        raw=True,
        produces="text/csv",
        description=_ACCESS,
    ),
)
