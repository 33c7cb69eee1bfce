"""The violations' part of a usage report: incidents caused (by the offender) and suffered (by
the reservation's owner), and GPU-hours the offender used without a reservation of their own.

An incident counts once, in the period it was opened in. Its time on the GPU (from when the
offence was first seen to its resolution, or to the last time it was seen while it is open) is
GPU-hours used without a reservation, in whatever part of it lies in the period.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.usage_report import HOUR_MS, FactSum, overlap_ms
from services.violations.tables import incidents

Row = tuple[str, str | None, str, str, int, int, int, int | None]


def incident_facts(rows: Iterable[Row], start_ms: int, end_ms: int) -> list[dict[str, Any]]:
    """Facts from (offender, owner, host, gpu_uuid, opened_at_ms, since_ms, last_seen_at_ms,
    resolved_at_ms) rows."""
    found = FactSum()
    for offender, owner, host, gpu_uuid, opened_at, since, last_seen, resolved_at in rows:
        until = resolved_at if resolved_at is not None else last_seen
        used_ms = overlap_ms(since, until, start_ms, end_ms)
        opened_in_period = start_ms <= opened_at < end_ms
        if used_ms > 0 or opened_in_period:
            found.add(
                offender,
                host,
                gpu_uuid,
                unreserved_gpu_hours=used_ms / HOUR_MS,
                violations_caused=int(opened_in_period),
            )
        if owner is not None and opened_in_period:
            found.add(owner, host, gpu_uuid, violations_suffered=1)
    return found.facts()


async def usage_report(conn: AsyncConnection, start_ms: int, end_ms: int) -> dict[str, Any]:
    c = incidents.c
    rows = await conn.execute(
        select(
            c.offender,
            c.owner,
            c.host,
            c.gpu_uuid,
            c.opened_at_ms,
            c.since_ms,
            c.last_seen_at_ms,
            c.resolved_at_ms,
        ).where(
            c.opened_at_ms < end_ms,
            # Opened in it, or still on the GPU when it began.
            or_(
                c.opened_at_ms >= start_ms, c.resolved_at_ms.is_(None), c.resolved_at_ms > start_ms
            ),
        )
    )
    return {"facts": incident_facts((tuple(row) for row in rows), start_ms, end_ms)}
