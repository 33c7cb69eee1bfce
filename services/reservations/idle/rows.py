"""The rows of idle states (`reservations_idle`): read, written, claimed by a link, counted."""

from __future__ import annotations

from typing import Any

from sqlalchemy import case, func, insert, select, update
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.idle.policy import IdleState
from services.reservations.store import from_ms, iso_ms, to_ms
from services.reservations.tables import idle_states

OUTCOMES = ("released_idle", "released_by_owner")


def _ms(moment: Any) -> int | None:
    return None if moment is None else to_ms(moment)


def state_of(row: Row[Any]) -> IdleState:
    return IdleState(
        since=None if row.since_ms is None else from_ms(row.since_ms),
        notified_at=None if row.notified_at_ms is None else from_ms(row.notified_at_ms),
        snoozed_until=None if row.snoozed_until_ms is None else from_ms(row.snoozed_until_ms),
        notices=row.notices,
    )


def stored(state: IdleState) -> tuple[Any, ...]:
    """The persisted part of a state: a change here is written."""
    return (state.since, state.notified_at, state.snoozed_until, state.notices)


async def rows(conn: AsyncConnection, ids: list[int]) -> dict[int, Row[Any]]:
    if not ids:
        return {}
    found = await conn.execute(select(idle_states).where(idle_states.c.reservation_id.in_(ids)))
    return {row.reservation_id: row for row in found}


async def row(conn: AsyncConnection, reservation_id: int) -> Row[Any] | None:
    found = await rows(conn, [reservation_id])
    return found.get(reservation_id)


async def save(
    conn: AsyncConnection, reservation_id: int, owner: str, state: IdleState, now_ms: int
) -> None:
    """Write the state (a row per reservation, made at its first change); never one released."""
    values = {
        "since_ms": _ms(state.since),
        "notified_at_ms": _ms(state.notified_at),
        "snoozed_until_ms": _ms(state.snoozed_until),
        "notices": state.notices,
        "updated_at_ms": now_ms,
    }
    changed = await conn.execute(
        update(idle_states)
        .where(idle_states.c.reservation_id == reservation_id, idle_states.c.outcome.is_(None))
        .values(**values)
    )
    if not changed.rowcount and await row(conn, reservation_id) is None:
        await conn.execute(
            insert(idle_states).values(reservation_id=reservation_id, owner=owner, kept=0, **values)
        )


async def mark_sent(conn: AsyncConnection, reservation_id: int, notice: int) -> None:
    """The notification path took notice number `notice`: no need to send it again."""
    await conn.execute(
        update(idle_states)
        .where(
            idle_states.c.reservation_id == reservation_id,
            idle_states.c.sent_notices < notice,
        )
        .values(sent_notices=notice)
    )


async def claim(
    conn: AsyncConnection, reservation_id: int, notice: int | None, values: dict[str, Any]
) -> bool:
    """Answer the pending notice once: the update happens only while the notice is pending (and,
    for a link, is the link's notice, not used yet); whether it did. Single use lives here."""
    where = [
        idle_states.c.reservation_id == reservation_id,
        idle_states.c.notified_at_ms.is_not(None),
        idle_states.c.outcome.is_(None),
    ]
    if notice is not None:
        where += [
            idle_states.c.notices == notice,
            (idle_states.c.link_used_notice.is_(None)) | (idle_states.c.link_used_notice != notice),
        ]
        values = {**values, "link_used_notice": notice}
    done = await conn.execute(update(idle_states).where(*where).values(**values))
    return bool(done.rowcount)


def kept_values(state: IdleState, now_ms: int) -> dict[str, Any]:
    return {
        "since_ms": None,
        "notified_at_ms": None,
        "snoozed_until_ms": _ms(state.snoozed_until),
        "kept": idle_states.c.kept + 1,
        "updated_at_ms": now_ms,
    }


def released_values(outcome: str, now_ms: int) -> dict[str, Any]:
    assert outcome in OUTCOMES
    return {"outcome": outcome, "released_at_ms": now_ms, "updated_at_ms": now_ms}


def describe(found: Row[Any]) -> dict[str, Any]:
    return {
        "idle_since": iso_ms(found.since_ms),
        "notified_at": iso_ms(found.notified_at_ms),
        "snoozed_until": iso_ms(found.snoozed_until_ms),
        "outcome": found.outcome,
        "released_at": iso_ms(found.released_at_ms),
    }


async def pending_of(conn: AsyncConnection, owner: str | None) -> list[Row[Any]]:
    """Notices not answered yet (of one owner, or everyone's)."""
    query = select(idle_states).where(
        idle_states.c.notified_at_ms.is_not(None), idle_states.c.outcome.is_(None)
    )
    if owner is not None:
        query = query.where(idle_states.c.owner == owner)
    return list(await conn.execute(query.order_by(idle_states.c.reservation_id)))


async def stats(conn: AsyncConnection) -> list[dict[str, Any]]:
    """Per user: notices, keeps, releases without an answer and by the owner."""
    c = idle_states.c
    found = await conn.execute(
        select(
            c.owner,
            func.sum(c.notices).label("notices"),
            func.sum(c.kept).label("kept"),
            func.sum(case((c.outcome == "released_idle", 1), else_=0)).label("released_idle"),
            func.sum(case((c.outcome == "released_by_owner", 1), else_=0)).label(
                "released_by_owner"
            ),
        )
        .where(c.notices > 0)
        .group_by(c.owner)
        .order_by(c.owner)
    )
    return [
        {
            "user": r.owner,
            "notices": int(r.notices or 0),
            "kept": int(r.kept or 0),
            "released_idle": int(r.released_idle or 0),
            "released_by_owner": int(r.released_by_owner or 0),
        }
        for r in found
    ]
