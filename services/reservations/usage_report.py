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

from sqlalchemy import select
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


def idle_share(usage: Mapping[str, Any] | None) -> float | None:
    """The share of a reservation's GPU-samples under the idle threshold; None: not measured."""
    totals = (usage or {}).get("totals") or {}
    samples = int(totals.get("gpu_samples") or 0)
    if samples <= 0:
        return None
    return min(1.0, int(totals.get("idle_samples") or 0) / samples)


def reservation_facts(
    rows: Iterable[tuple[str, str, str, int, int, int | None, Mapping[str, Any] | None]],
    hosts: Mapping[str, str],
    start_ms: int,
    end_ms: int,
) -> list[dict[str, Any]]:
    """Facts from (owner, gpu_uuid, status, start_ms, end_ms, cancelled_at_ms, usage) rows,
    one per reserved GPU; `hosts` maps a GPU to its host."""
    found = FactSum()
    for owner, gpu_uuid, status, r_start, r_end, cancelled_at, usage in rows:
        held_ms = overlap_ms(r_start, held_until_ms(status, r_end, cancelled_at), start_ms, end_ms)
        if held_ms <= 0:
            continue
        hours = held_ms / HOUR_MS
        share = idle_share(usage)
        figures = {"reserved_gpu_hours": hours}
        if share is not None:
            figures["idle_gpu_hours"] = hours * share
            figures["used_gpu_hours"] = hours * (1.0 - share)
        found.add(owner, hosts.get(gpu_uuid), gpu_uuid, **figures)
    return found.facts()


async def usage_report(conn: AsyncConnection, start_ms: int, end_ms: int) -> dict[str, Any]:
    """The facts of `[start_ms, end_ms)`, every known GPU, and the groups' members."""
    known = (
        await conn.execute(select(gpus.c.uuid, gpus.c.host, gpus.c.name, gpus.c.gpu_index))
    ).all()
    hosts = {row.uuid: row.host for row in known}
    rows = await conn.execute(
        select(
            gpu_slots.c.owner,
            gpu_slots.c.gpu_uuid,
            reservations.c.status,
            reservations.c.start_ms,
            reservations.c.end_ms,
            reservations.c.cancelled_at_ms,
            reservations.c.usage,
        )
        .join(reservations, reservations.c.id == gpu_slots.c.reservation_id)
        .where(reservations.c.start_ms < end_ms, reservations.c.end_ms > start_ms)
    )
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
        "facts": reservation_facts((tuple(row) for row in rows), hosts, start_ms, end_ms),
        "gpus": [
            {"uuid": row.uuid, "host": row.host, "index": row.gpu_index, "model": row.name}
            for row in known
        ],
        "groups": [
            {"user": user, "groups": sorted(names_)} for user, names_ in memberships.items()
        ],
    }
