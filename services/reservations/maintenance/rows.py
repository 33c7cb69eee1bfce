"""SQL for maintenance windows (`tables.maintenance_windows`): rows in, plain data out."""

from __future__ import annotations

from typing import Any

from sqlalchemy import delete, insert, or_, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.rules.maintenance import Window
from services.reservations.store import from_ms, iso_ms
from services.reservations.tables import maintenance_windows as table


def _indices(text: str | None) -> frozenset[int] | None:
    return None if text is None else frozenset(int(part) for part in text.split(","))


def window(row: Row[Any]) -> Window:
    return Window(
        id=row.id,
        host=row.host,
        indices=_indices(row.gpu_indices),
        start=from_ms(row.start_ms),
        end=None if row.end_ms is None else from_ms(row.end_ms),
        reason=row.reason,
        created_by=row.created_by,
    )


def to_dict(row: Row[Any], now_ms: int, status: str | None = None) -> dict[str, Any]:
    """A window as the api answers it (`MaintenanceSchema`)."""
    if status is None:
        if row.end_ms is not None and row.end_ms <= now_ms:
            status = "ended"
        else:
            status = "active" if row.start_ms <= now_ms else "scheduled"
    indices = _indices(row.gpu_indices)
    return {
        "id": row.id,
        "host": row.host,
        "gpus": None if indices is None else sorted(indices),
        "target": window(row).target,
        "start": iso_ms(row.start_ms),
        "end": None if row.end_ms is None else iso_ms(row.end_ms),
        "reason": row.reason,
        "bookings": row.bookings,
        "stop_jobs": bool(row.stop_jobs),
        "created_by": row.created_by,
        "created_at": iso_ms(row.created_at_ms),
        "ended_by": row.ended_by,
        "status": status,
    }


async def add(
    conn: AsyncConnection,
    *,
    host: str,
    indices: frozenset[int] | None,
    start_ms: int,
    end_ms: int | None,
    reason: str,
    bookings: str,
    stop_jobs: bool,
    created_by: str,
    now_ms: int,
) -> int:
    result = await conn.execute(
        insert(table).values(
            host=host,
            gpu_indices=None if indices is None else ",".join(str(i) for i in sorted(indices)),
            start_ms=start_ms,
            end_ms=end_ms,
            reason=reason,
            bookings=bookings,
            stop_jobs=stop_jobs,
            created_by=created_by,
            created_at_ms=now_ms,
        )
    )
    new_id = result.inserted_primary_key
    assert new_id is not None
    return int(new_id[0])


async def row(conn: AsyncConnection, window_id: int) -> Row[Any] | None:
    return (await conn.execute(select(table).where(table.c.id == window_id))).first()


async def rows(conn: AsyncConnection, start_ms: int, end_ms: int | None) -> list[Row[Any]]:
    """The windows that touch [start, end) (`end` None: every one not over by `start`)."""
    query = select(table).where(or_(table.c.end_ms.is_(None), table.c.end_ms > start_ms))
    if end_ms is not None:
        query = query.where(table.c.start_ms < end_ms)
    return list(await conn.execute(query.order_by(table.c.start_ms, table.c.id)))


async def windows(conn: AsyncConnection, start_ms: int, end_ms: int | None = None) -> list[Window]:
    return [window(found) for found in await rows(conn, start_ms, end_ms)]


async def end(conn: AsyncConnection, window_id: int, end_ms: int, by: str) -> None:
    await conn.execute(
        update(table).where(table.c.id == window_id).values(end_ms=end_ms, ended_by=by)
    )


async def remove(conn: AsyncConnection, window_id: int) -> None:
    await conn.execute(delete(table).where(table.c.id == window_id))
