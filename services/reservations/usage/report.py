"""The reservations' part of a usage report: GPU-hours reserved, used and idle per owner and
GPU, the GPUs' hosts and models, and who is in which group.

Usage is stored per reservation as totals of monitor samples (`usage.py`): how many GPU-samples
had a utilisation figure and how many of them were under `[reservations] idle_below_percent`.
The reserved time in the period is split into used and idle in that proportion; a reservation
with no samples (the monitor never reported its GPUs) counts as reserved only.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from sqlalchemy import BigInteger, Float, Select, case, cast, func, literal, select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.tables import (
    gpu_slots,
    gpus,
    group_members,
    groups,
    reservations,
    users,
)
from services.shared.usage_report import HOUR_MS, FactSum, overlap_ms


def held_until_ms(status: str, end_ms: int, cancelled_at_ms: int | None) -> int:
    """When a booking stopped holding its GPUs: its end, or when it was cancelled (a cancelled
    booking that had started held them until then; one cancelled before its start never did)."""
    if status == "cancelled":
        return min(end_ms, cancelled_at_ms if cancelled_at_ms is not None else 0)
    return end_ms


def idle_share(gpu_samples: int | None, idle_samples: int | None) -> float | None:
    """The share of a reservation's GPU-samples under the idle threshold; None: not measured."""
    if not gpu_samples or gpu_samples <= 0:
        return None
    return min(1.0, (idle_samples or 0) / gpu_samples)


def reservation_facts(
    rows: Iterable[tuple[str, str, str, int, int, int | None, int | None, int | None]],
    hosts: Mapping[str, str],
    start_ms: int,
    end_ms: int,
) -> list[dict[str, Any]]:
    """Facts from (owner, gpu_uuid, status, start_ms, end_ms, cancelled_at_ms, gpu_samples,
    idle_samples) rows, one per reserved GPU (the samples from the stored usage totals);
    `hosts` maps a GPU to its host. The rule, row by row; `held_query` applies it in SQL."""
    found = FactSum()
    for owner, gpu_uuid, status, r_start, r_end, cancelled_at, samples, idle in rows:
        held_ms = overlap_ms(r_start, held_until_ms(status, r_end, cancelled_at), start_ms, end_ms)
        if held_ms <= 0:
            continue
        hours = held_ms / HOUR_MS
        share = idle_share(samples, idle)
        figures = {"reserved_gpu_hours": hours}
        if share is not None:
            figures["idle_gpu_hours"] = hours * share
            figures["used_gpu_hours"] = hours * (1.0 - share)
        found.add(owner, hosts.get(gpu_uuid), gpu_uuid, **figures)
    return found.facts()


def summed_facts(
    rows: Iterable[tuple[str, str, Any, Any, Any]],
    hosts: Mapping[str, str],
) -> list[dict[str, Any]]:
    """Facts from (owner, gpu_uuid, held_ms, measured_ms, idle_ms) sums, as `held_query` adds
    them up: the same figures `reservation_facts` gives for the rows they sum."""
    found = FactSum()
    for owner, gpu_uuid, held, measured, idle in rows:
        # Sums come back as int, float or Decimal, depending on the database.
        held_ms, measured_ms = float(held or 0), float(measured or 0)
        if held_ms <= 0:
            continue
        figures = {"reserved_gpu_hours": held_ms / HOUR_MS}
        if measured_ms > 0:
            idle_hours = float(idle or 0) / HOUR_MS
            figures["idle_gpu_hours"] = idle_hours
            figures["used_gpu_hours"] = measured_ms / HOUR_MS - idle_hours
        found.add(owner, hosts.get(gpu_uuid), gpu_uuid, **figures)
    return found.facts()


def _least(a: Any, b: Any) -> Any:
    return case((a < b, a), else_=b)


def _greatest(a: Any, b: Any) -> Any:
    return case((a > b, a), else_=b)


def held_query(start_ms: int, end_ms: int) -> Select[Any]:
    """`reservation_facts` in SQL, summed per (owner, GPU): a year of a busy lab is tens of
    thousands of bookings, and reading each into Python (its usage JSON decoded) took seconds;
    the database adds them up and reads only two numbers out of each JSON document."""
    r = reservations.c
    period_start, period_end = literal(start_ms, BigInteger), literal(end_ms, BigInteger)
    until = case(
        (r.status == "cancelled", _least(r.end_ms, func.coalesce(r.cancelled_at_ms, 0))),
        else_=r.end_ms,
    )
    lo, hi = _greatest(r.start_ms, period_start), _least(until, period_end)
    held = case((hi > lo, hi - lo), else_=0)
    samples = func.coalesce(r.usage[("totals", "gpu_samples")].as_integer(), 0)
    idle = func.coalesce(r.usage[("totals", "idle_samples")].as_integer(), 0)
    share = case((idle >= samples, 1.0), else_=cast(idle, Float) / cast(samples, Float))
    measured = case((samples > 0, held), else_=0)
    idle_ms = case((samples > 0, cast(held, Float) * share), else_=0.0)
    return (
        select(
            gpu_slots.c.owner,
            gpu_slots.c.gpu_uuid,
            func.sum(held),
            func.sum(measured),
            func.sum(idle_ms),
        )
        .join(reservations, r.id == gpu_slots.c.reservation_id)
        .where(r.start_ms < end_ms, r.end_ms > start_ms)
        .group_by(gpu_slots.c.owner, gpu_slots.c.gpu_uuid)
    )


async def usage_report(conn: AsyncConnection, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The facts of `[start_ms, end_ms)`, every known GPU, and the groups' members."""
    known = (
        await conn.execute(select(gpus.c.uuid, gpus.c.host, gpus.c.name, gpus.c.gpu_index))
    ).all()
    hosts = {row.uuid: row.host for row in known}
    sums = await conn.execute(held_query(start_ms, end_ms))
    members = (
        await conn.execute(
            select(groups.c.name, group_members.c.user_id).join(
                group_members, group_members.c.group_id == groups.c.id
            )
        )
    ).all()
    names = dict((await conn.execute(select(users.c.id, users.c.username))).all())
    memberships: dict[str, list[str]] = {}
    for group, user_id in members:
        if user_id in names:
            memberships.setdefault(names[user_id], []).append(group)
    return {
        "facts": summed_facts((tuple(row) for row in sums), hosts),
        "gpus": [
            {"uuid": row.uuid, "host": row.host, "index": row.gpu_index, "model": row.name}
            for row in known
        ],
        "groups": [
            {"user": user, "groups": sorted(names_)} for user, names_ in memberships.items()
        ],
    }
