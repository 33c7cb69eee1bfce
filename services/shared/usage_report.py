"""What every service's part of a usage report shares: the period asked for, the overlap of an
interval with it, and the shape of one fact (pure).

A report is composed by the gateway from one RPC answer per service (reservations, violations,
jobs). Each answer is a list of *facts*: figures of one user on one GPU (or one host when a job
ran on no GPU), already added up by the service that owns the data. The gateway then groups
them by user, group, host or GPU model; no service sees another's tables.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any

from marshmallow import Schema, ValidationError, fields, validates_schema
from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.storage.store import Store

HOUR_MS = 3_600_000

# The figures a fact may carry; each service fills its own and leaves the others out.
FIGURES: tuple[str, ...] = (
    "reserved_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "unreserved_gpu_hours",
    "violations_caused",
    "violations_suffered",
    "jobs",
)


class PeriodArgs(Schema):
    """`[start, end)`, both aware; the report stops at the service's `now` if that is earlier."""

    start = fields.AwareDateTime(required=True)
    end = fields.AwareDateTime(required=True)

    @validates_schema
    def ordered(self, data: dict[str, Any], **_: Any) -> None:
        if data["end"] <= data["start"]:
            raise ValidationError("must be after start", "end")


class FactSchema(Schema):
    user = fields.String(required=True)
    host = fields.String(required=True, allow_none=True)
    gpu_uuid = fields.String(required=True, allow_none=True)
    reserved_gpu_hours = fields.Float()
    used_gpu_hours = fields.Float()
    idle_gpu_hours = fields.Float()
    unreserved_gpu_hours = fields.Float()
    violations_caused = fields.Integer()
    violations_suffered = fields.Integer()
    jobs = fields.Integer()


def overlap_ms(start_ms: int, end_ms: int, period_start_ms: int, period_end_ms: int) -> int:
    """How much of `[start_ms, end_ms)` lies in the period (0 when none)."""
    return max(0, min(end_ms, period_end_ms) - max(start_ms, period_start_ms))


class FactSum:
    """Facts added up by (user, host, gpu_uuid): what a service answers."""

    def __init__(self) -> None:
        self._facts: dict[tuple[str, str | None, str | None], dict[str, Any]] = {}

    def add(self, user: str, host: str | None, gpu_uuid: str | None, **figures: float) -> None:
        key = (user, host, gpu_uuid)
        fact = self._facts.get(key)
        if fact is None:
            fact = self._facts[key] = {"user": user, "host": host, "gpu_uuid": gpu_uuid}
        for name, value in figures.items():
            fact[name] = fact.get(name, 0) + value

    def facts(self) -> list[dict[str, Any]]:
        return [_rounded(fact) for fact in self._facts.values()]


def _rounded(fact: dict[str, Any]) -> dict[str, Any]:
    return {
        key: round(value, 6) if isinstance(value, float) else value for key, value in fact.items()
    }


class FactsSchema(Schema):
    facts = fields.List(fields.Nested(FactSchema), required=True)


def to_ms(moment: datetime) -> int:
    return int(moment.timestamp() * 1000)


Report = Callable[[AsyncConnection, int, int], Awaitable[dict[str, Any]]]


def report_handler(store: Store, report: Report) -> Callable[[dict[str, Any]], Awaitable[Any]]:
    """The `usage_report` RPC handler of a service: `report` over one read transaction."""

    async def usage_report(args: dict[str, Any]) -> dict[str, Any]:
        async with store.read() as conn:
            return await report(conn, to_ms(args["start"]), to_ms(args["end"]))

    return usage_report
