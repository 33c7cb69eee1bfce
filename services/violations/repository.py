"""Incidents and their timelines in SQL: rows to `Incident`s and back, and the queries."""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from sqlalchemy import and_, func, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.config import parse_step
from services.shared.storage.store import from_ms, iso_ms, now_ms, to_ms
from services.violations.detector import SeenProcess
from services.violations.incidents import Incident, process_data
from services.violations.step_outcome import last_step
from services.violations.tables import actions, incidents, step_claims


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def _processes_json(processes: Iterable[SeenProcess]) -> str:
    return json.dumps([process_data(p) for p in processes])


def _processes(text: str, gpu_uuid: str, user: str) -> tuple[SeenProcess, ...]:
    return tuple(
        SeenProcess(
            pid=p["pid"],
            user=user,
            command=p["command"],
            gpu_uuid=gpu_uuid,
            started_at=None
            if p.get("started_at") is None
            else datetime.fromisoformat(p["started_at"]),
            used_memory_mib=p.get("used_memory_mib"),
        )
        for p in json.loads(text)
    )


def incident_from_row(row: Any, steps_done: Iterable[int] = ()) -> Incident:
    return Incident(
        id=row.id,
        host=row.host,
        gpu_uuid=row.gpu_uuid,
        gpu_index=row.gpu_index,
        offender=row.offender,
        mode=row.mode,
        reservation_id=row.reservation_id,
        owner=row.owner,
        reservation_start=_time(row.reservation_start_ms),
        reservation_end=_time(row.reservation_end_ms),
        opened_at=from_ms(row.opened_at_ms),
        since=from_ms(row.since_ms),
        last_seen_at=from_ms(row.last_seen_at_ms),
        processes=_processes(row.processes, row.gpu_uuid, row.offender),
        steps=tuple(parse_step(text) for text in json.loads(row.steps)),
        steps_done=frozenset(steps_done),
        resolved_at=_time(row.resolved_at_ms),
        resolve_reason=row.resolve_reason,
    )


async def insert_incident(conn: AsyncConnection, incident: Incident) -> None:
    await conn.execute(
        insert(incidents).values(
            id=incident.id,
            host=incident.host,
            gpu_uuid=incident.gpu_uuid,
            gpu_index=incident.gpu_index,
            offender=incident.offender,
            mode=incident.mode,
            reservation_id=incident.reservation_id,
            owner=incident.owner,
            reservation_start_ms=_ms(incident.reservation_start),
            reservation_end_ms=_ms(incident.reservation_end),
            opened_at_ms=to_ms(incident.opened_at),
            since_ms=to_ms(incident.since),
            last_seen_at_ms=to_ms(incident.last_seen_at),
            processes=_processes_json(incident.processes),
            steps=json.dumps([step.text for step in incident.steps]),
        )
    )


async def save_processes(conn: AsyncConnection, incident: Incident) -> None:
    await conn.execute(
        update(incidents)
        .where(incidents.c.id == incident.id)
        .values(
            processes=_processes_json(incident.processes),
            last_seen_at_ms=to_ms(incident.last_seen_at),
        )
    )


async def save_last_seen(conn: AsyncConnection, seen: Mapping[str, datetime]) -> None:
    """Open incidents seen again (id -> when): their last sighting, never moved back."""
    for incident_id, moment in seen.items():
        ms = to_ms(moment)
        await conn.execute(
            update(incidents)
            .where(
                incidents.c.id == incident_id,
                incidents.c.resolved_at_ms.is_(None),
                incidents.c.last_seen_at_ms < ms,
            )
            .values(last_seen_at_ms=ms)
        )


async def save_resolved(conn: AsyncConnection, incident: Incident) -> None:
    assert incident.resolved_at is not None
    await conn.execute(
        update(incidents)
        .where(incidents.c.id == incident.id, incidents.c.resolved_at_ms.is_(None))
        .values(
            resolved_at_ms=to_ms(incident.resolved_at),
            resolve_reason=incident.resolve_reason,
            last_seen_at_ms=to_ms(incident.last_seen_at),
        )
    )


async def add_action(
    conn: AsyncConnection,
    incident_id: str,
    at: datetime,
    kind: str,
    *,
    step_index: int | None = None,
    handler: str | None = None,
    target: str | None = None,
    ok: bool | None = None,
    detail: str = "",
) -> None:
    await conn.execute(
        insert(actions).values(
            incident_id=incident_id,
            at_ms=to_ms(at),
            kind=kind,
            step_index=step_index,
            handler=handler,
            target=target,
            ok=ok,
            detail=detail,
        )
    )


async def load_open(conn: AsyncConnection) -> list[Incident]:
    rows = (await conn.execute(select(incidents).where(incidents.c.resolved_at_ms.is_(None)))).all()
    if not rows:
        return []
    done: dict[str, set[int]] = {}
    escalated = await conn.execute(
        select(actions.c.incident_id, actions.c.step_index).where(
            actions.c.kind == "escalated",
            actions.c.incident_id.in_([row.id for row in rows]),
        )
    )
    for incident_id, step_index in escalated:
        done.setdefault(incident_id, set()).add(step_index)
    return [incident_from_row(row, done.get(row.id, ())) for row in rows]


def _present(row: Any) -> dict[str, Any]:
    return {
        "id": row.id,
        "status": "open" if row.resolved_at_ms is None else "resolved",
        "mode": row.mode,
        "host": row.host,
        "gpu_uuid": row.gpu_uuid,
        "gpu_index": row.gpu_index,
        "offender": row.offender,
        "reservation_id": row.reservation_id,
        "owner": row.owner,
        "reservation_start": iso_ms(row.reservation_start_ms),
        "reservation_end": iso_ms(row.reservation_end_ms),
        "opened_at": iso_ms(row.opened_at_ms),
        "since": iso_ms(row.since_ms),
        "last_seen_at": iso_ms(row.last_seen_at_ms),
        "resolved_at": iso_ms(row.resolved_at_ms),
        "resolve_reason": row.resolve_reason,
        "processes": json.loads(row.processes),
        "steps": json.loads(row.steps),
    }


FILTERS = ("host", "offender", "owner", "reservation_id", "gpu_uuid")


async def list_incidents(
    conn: AsyncConnection,
    filters: Mapping[str, Any],
    *,
    status: str | None,
    involving: str | None,
    opened_after: datetime | None,
    opened_before: datetime | None,
    limit: int,
    offset: int,
) -> dict[str, Any]:
    """Incidents, newest first, with the total matching count (for pagination)."""
    conditions = [getattr(incidents.c, key) == value for key, value in filters.items()]
    if status == "open":
        conditions.append(incidents.c.resolved_at_ms.is_(None))
    elif status == "resolved":
        conditions.append(incidents.c.resolved_at_ms.is_not(None))
    if involving is not None:
        conditions.append((incidents.c.offender == involving) | (incidents.c.owner == involving))
    if opened_after is not None:
        conditions.append(incidents.c.opened_at_ms >= to_ms(opened_after))
    if opened_before is not None:
        conditions.append(incidents.c.opened_at_ms < to_ms(opened_before))
    where = and_(True, *conditions)
    total = (await conn.execute(select(func.count()).select_from(incidents).where(where))).scalar()
    rows = (
        await conn.execute(
            select(incidents)
            .where(where)
            .order_by(incidents.c.opened_at_ms.desc(), incidents.c.id)
            .limit(limit)
            .offset(offset)
        )
    ).all()
    steps = await _step_entries(conn, [row.id for row in rows])
    return {
        "total": total,
        "incidents": [
            {**_present(row), "last_step": last_step(steps.get(row.id, ()))} for row in rows
        ],
    }


async def _step_entries(
    conn: AsyncConnection, incident_ids: list[str]
) -> dict[str, list[dict[str, Any]]]:
    """Per incident, its `escalated` and `action` timeline entries, oldest first."""
    if not incident_ids:
        return {}
    rows = await conn.execute(
        select(actions)
        .where(
            actions.c.incident_id.in_(incident_ids),
            actions.c.kind.in_(("escalated", "action")),
        )
        .order_by(actions.c.id)
    )
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in rows:
        found.setdefault(entry.incident_id, []).append(_entry(entry))
    return found


def _entry(entry: Any) -> dict[str, Any]:
    return {
        "at": iso_ms(entry.at_ms),
        "kind": entry.kind,
        "step_index": entry.step_index,
        "handler": entry.handler,
        "target": entry.target,
        "ok": entry.ok,
        "detail": entry.detail,
    }


async def get_incident(conn: AsyncConnection, incident_id: str) -> dict[str, Any] | None:
    """One incident with its timeline, oldest entry first."""
    row = (await conn.execute(select(incidents).where(incidents.c.id == incident_id))).first()
    if row is None:
        return None
    timeline = (
        await conn.execute(
            select(actions).where(actions.c.incident_id == incident_id).order_by(actions.c.id)
        )
    ).all()
    entries = [_entry(entry) for entry in timeline]
    return {**_present(row), "last_step": last_step(entries), "timeline": entries}


async def host_watermarks(conn: AsyncConnection) -> dict[str, datetime]:
    """Per host, the newest snapshot time any incident has seen (older snapshots are stale)."""
    rows = await conn.execute(
        select(incidents.c.host, func.max(incidents.c.last_seen_at_ms)).group_by(incidents.c.host)
    )
    return {host: from_ms(ms) for host, ms in rows}


async def claim_step(
    conn: AsyncConnection, incident_id: str, step_index: int, handler: str, holder: str
) -> None:
    """Mark a handler's step taken; IntegrityError when it was claimed before."""
    await conn.execute(
        insert(step_claims).values(
            incident_id=incident_id,
            step_index=step_index,
            handler=handler,
            holder=holder,
            at_ms=now_ms(),
        )
    )
