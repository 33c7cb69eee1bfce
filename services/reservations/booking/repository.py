"""SQL for GPUs, access rules and reservations: rows in, plain data out.

Functions take the caller's connection, so a check and the write it guards share one
transaction (see `store.write`).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import time, timedelta
from typing import Any

from sqlalchemy import and_, select
from sqlalchemy.engine import Row
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users as accounts
from services.reservations.rules.domain import (
    AccessRule,
    Booking,
    Gpu,
    IdlePolicy,
    Limits,
    Member,
    WeeklyWindow,
)
from services.reservations.rules.refusals import Clash, Current
from services.reservations.store import from_ms, iso_ms, now_ms, to_ms
from services.reservations.tables import access_rules, gpu_slots, gpus, guests, reservations
from services.reservations.usage.totals import from_row, summary
from services.shared.errors import NotFound
from services.shared.gpu_labels import gpu_labels

# --- GPUs ---------------------------------------------------------------------------------------


def _gpu(row: Row[Any]) -> Gpu:
    return Gpu(
        uuid=row.uuid,
        host=row.host,
        index=row.gpu_index,
        name=row.name,
        memory_total_mib=row.memory_total_mib,
        present=row.present,
        mig_parent_uuid=row.mig_parent_uuid,
        health=row.health,
        health_reason=row.health_reason,
    )


async def load_gpus(conn: AsyncConnection, uuids: Iterable[str] | None = None) -> dict[str, Gpu]:
    """Known GPUs by uuid (all, or those of `uuids`), in host and index order."""
    query = select(gpus).order_by(gpus.c.host, gpus.c.gpu_index)
    if uuids is not None:
        query = query.where(gpus.c.uuid.in_(list(uuids)))
    return {row.uuid: _gpu(row) for row in await conn.execute(query)}


def gpu_dict(gpu: Gpu) -> dict[str, Any]:
    return {
        "uuid": gpu.uuid,
        "host": gpu.host,
        "index": gpu.index,
        "name": gpu.name,
        "memory_total_mib": gpu.memory_total_mib,
        "present": gpu.present,
        "labels": gpu_labels(gpu.name, gpu.memory_total_mib),
        "mig_parent_uuid": gpu.mig_parent_uuid,
        "health": gpu.health,
        "health_reason": gpu.health_reason,
    }


# --- access rules -------------------------------------------------------------------------------


def _parse_time(text: str) -> time:
    hours, minutes = text.split(":")
    return time(int(hours), int(minutes))


def windows_from_json(raw: Sequence[dict[str, Any]]) -> tuple[WeeklyWindow, ...]:
    return tuple(
        WeeklyWindow(
            days=frozenset(w["days"]), start=_parse_time(w["start"]), end=_parse_time(w["end"])
        )
        for w in raw
    )


def windows_to_json(windows: Sequence[WeeklyWindow]) -> list[dict[str, Any]]:
    return [
        {"days": sorted(w.days), "start": w.start.strftime("%H:%M"), "end": w.end.strftime("%H:%M")}
        for w in windows
    ]


def rule_from_row(row: Row[Any]) -> AccessRule:
    return AccessRule(
        id=row.id,
        name=row.name,
        valid_from=from_ms(row.valid_from_ms),
        valid_until=None if row.valid_until_ms is None else from_ms(row.valid_until_ms),
        users=frozenset(row.users),
        groups=frozenset(row.groups),
        all_gpus=row.all_gpus,
        hosts=frozenset(row.hosts),
        gpus=frozenset(row.gpus),
        labels=tuple(row.labels or ()),
        windows=windows_from_json(row.windows),
        timezone=row.timezone,
        limits=Limits(
            max_gpus=row.max_gpus,
            max_duration=None
            if row.max_duration_s is None
            else timedelta(seconds=row.max_duration_s),
            max_gpu_hours_per_week=row.max_gpu_hours_per_week,
        ),
        idle_policy=None if row.idle_policy is None else IdlePolicy(**row.idle_policy),
    )


def rule_values(rule: AccessRule) -> dict[str, Any]:
    """Column values of `rule` (without id and audit columns)."""
    limits = rule.limits
    return {
        "name": rule.name,
        "users": sorted(rule.users),
        "groups": sorted(rule.groups),
        "all_gpus": rule.all_gpus,
        "hosts": sorted(rule.hosts),
        "gpus": sorted(rule.gpus),
        "labels": list(rule.labels),
        "valid_from_ms": to_ms(rule.valid_from),
        "valid_until_ms": None if rule.valid_until is None else to_ms(rule.valid_until),
        "windows": windows_to_json(rule.windows),
        "timezone": rule.timezone,
        "max_gpus": limits.max_gpus,
        "max_duration_s": None
        if limits.max_duration is None
        else int(limits.max_duration.total_seconds()),
        "max_gpu_hours_per_week": limits.max_gpu_hours_per_week,
        "idle_policy": None if rule.idle_policy is None else rule.idle_policy.to_dict(),
    }


def rule_dict(row: Row[Any]) -> dict[str, Any]:
    return {
        "id": row.id,
        "name": row.name,
        "description": row.description,
        "users": list(row.users),
        "groups": list(row.groups),
        "all_gpus": row.all_gpus,
        "hosts": list(row.hosts),
        "gpus": list(row.gpus),
        "labels": list(row.labels or ()),
        "valid_from": iso_ms(row.valid_from_ms),
        "valid_until": iso_ms(row.valid_until_ms),
        "windows": list(row.windows),
        "timezone": row.timezone,
        "max_gpus": row.max_gpus,
        "max_duration_s": row.max_duration_s,
        "max_gpu_hours_per_week": row.max_gpu_hours_per_week,
        "idle_policy": row.idle_policy,
        "created_by": row.created_by,
        "created_at": iso_ms(row.created_at_ms),
        "updated_at": iso_ms(row.updated_at_ms),
    }


async def rule_rows(conn: AsyncConnection) -> list[Row[Any]]:
    return list(await conn.execute(select(access_rules).order_by(access_rules.c.id)))


async def load_rules(conn: AsyncConnection) -> list[AccessRule]:
    return [rule_from_row(row) for row in await rule_rows(conn)]


async def rule_row(conn: AsyncConnection, rule_id: int) -> Row[Any] | None:
    return (await conn.execute(select(access_rules).where(access_rules.c.id == rule_id))).first()


# --- reservations -------------------------------------------------------------------------------


@dataclass(frozen=True)
class ReservationRecord:
    id: int
    owner: str
    title: str
    description: str
    start_ms: int
    end_ms: int
    status: str
    created_by: str
    created_at_ms: int
    updated_at_ms: int
    cancelled_at_ms: int | None
    cancelled_by: str | None
    cancel_reason: str | None
    cancelled_by_rules: bool
    started_event_ms: int | None
    ended_event_ms: int | None
    usage: dict[str, Any] | None
    gpu_uuids: tuple[str, ...] = field(default=())
    guests: tuple[str, ...] = field(default=())  # usernames, sorted

    @property
    def current(self) -> Current:
        return Current(self.owner, from_ms(self.start_ms), from_ms(self.end_ms), self.status)

    @property
    def booking(self) -> Booking:
        return Booking(
            self.id,
            self.owner,
            frozenset(self.gpu_uuids),
            from_ms(self.start_ms),
            from_ms(self.end_ms),
        )

    def _gpu_refs(self, known: dict[str, Gpu]) -> list[dict[str, Any]]:
        refs = []
        for uuid in self.gpu_uuids:
            gpu = known.get(uuid)
            refs.append(
                {"uuid": uuid, "host": gpu.host if gpu else "", "index": gpu.index if gpu else None}
            )
        return sorted(refs, key=lambda g: (g["host"], g["index"] if g["index"] is not None else -1))

    @property
    def shown_status(self) -> str:
        """active, cancelled, or ended once its end has passed (stored as active: `ended`
        needs no write, and the past is never rewritten)."""
        if self.status == "active" and self.end_ms <= now_ms():
            return "ended"
        return self.status

    def event_data(self, known: dict[str, Gpu]) -> dict[str, Any]:
        """The reservation as reservation.* events carry it."""
        return {
            "id": self.id,
            "owner": self.owner,
            "gpus": self._gpu_refs(known),
            "start": iso_ms(self.start_ms),
            "end": iso_ms(self.end_ms),
            "title": self.title,
            "description": self.description,
            "status": self.shown_status,
            "created_by": self.created_by,
            "cancelled_at": iso_ms(self.cancelled_at_ms),
            "cancelled_by": self.cancelled_by,
            "cancel_reason": self.cancel_reason,
            "guests": list(self.guests),
            "updated_at": iso_ms(self.updated_at_ms),
        }

    def to_dict(self, known: dict[str, Gpu]) -> dict[str, Any]:
        """The reservation as RPC answers give it."""
        gpu_refs = self._gpu_refs(known)
        for ref in gpu_refs:
            gpu = known.get(ref["uuid"])
            ref["name"] = gpu.name if gpu else ""
        return {
            **self.event_data(known),
            "gpus": gpu_refs,
            "created_at": iso_ms(self.created_at_ms),
            "cancelled_by_rules": self.cancelled_by_rules,
            "usage": None
            if self.usage is None
            else summary(from_row(self.usage.get("totals") or {})),
        }


async def records(conn: AsyncConnection, ids: Iterable[int]) -> dict[int, ReservationRecord]:
    """Reservations by id, each with its GPUs and guests (three queries per 500 ids)."""
    wanted = list(dict.fromkeys(ids))
    if not wanted:
        return {}
    gpus_of: dict[int, list[str]] = {}
    guests_of: dict[int, list[str]] = {}
    found: dict[int, ReservationRecord] = {}
    for chunk_start in range(0, len(wanted), 500):
        chunk = wanted[chunk_start : chunk_start + 500]
        slots = await conn.execute(
            select(gpu_slots.c.reservation_id, gpu_slots.c.gpu_uuid).where(
                gpu_slots.c.reservation_id.in_(chunk)
            )
        )
        for reservation_id, uuid in slots:
            gpus_of.setdefault(reservation_id, []).append(uuid)
        named = await conn.execute(
            select(guests.c.reservation_id, guests.c.username).where(
                guests.c.reservation_id.in_(chunk)
            )
        )
        for reservation_id, username in named:
            guests_of.setdefault(reservation_id, []).append(username)
        for row in await conn.execute(select(reservations).where(reservations.c.id.in_(chunk))):
            found[row.id] = ReservationRecord(
                **row._asdict(),
                gpu_uuids=tuple(sorted(gpus_of.get(row.id, ()))),
                guests=tuple(sorted(guests_of.get(row.id, ()))),
            )
    return found


async def record(conn: AsyncConnection, reservation_id: int) -> ReservationRecord | None:
    return (await records(conn, [reservation_id])).get(reservation_id)


async def clashes(
    conn: AsyncConnection,
    gpu_uuids: Sequence[str],
    start_ms: int,
    end_ms: int,
    exclude_id: int | None = None,
) -> list[Clash]:
    """Active reservations holding one of `gpu_uuids` at some point of [start, end)."""
    query = select(
        gpu_slots.c.gpu_uuid,
        gpu_slots.c.reservation_id,
        gpu_slots.c.owner,
        gpu_slots.c.start_ms,
        gpu_slots.c.end_ms,
    ).where(
        gpu_slots.c.gpu_uuid.in_(list(gpu_uuids)),
        gpu_slots.c.end_ms > start_ms,
        gpu_slots.c.start_ms < end_ms,
        gpu_slots.c.active.is_(True),
    )
    if exclude_id is not None:
        query = query.where(gpu_slots.c.reservation_id != exclude_id)
    return [
        Clash(
            row.gpu_uuid, row.reservation_id, row.owner, from_ms(row.start_ms), from_ms(row.end_ms)
        )
        for row in await conn.execute(query)
    ]


async def slots_in_range(
    conn: AsyncConnection,
    start_ms: int,
    end_ms: int,
    gpu_uuids: Sequence[str] | None = None,
    *,
    owner: str | None = None,
    active_only: bool = True,
) -> list[Row[Any]]:
    """GPU slots (reservation_id, gpu_uuid, owner, start_ms, end_ms, active) overlapping."""
    conditions = [gpu_slots.c.end_ms > start_ms, gpu_slots.c.start_ms < end_ms]
    if gpu_uuids is not None:
        conditions.append(gpu_slots.c.gpu_uuid.in_(list(gpu_uuids)))
    if owner is not None:
        conditions.append(gpu_slots.c.owner == owner)
    if active_only:
        conditions.append(gpu_slots.c.active.is_(True))
    return list(await conn.execute(select(gpu_slots).where(and_(*conditions))))


def bookings_from_slots(rows: Iterable[Row[Any]]) -> list[Booking]:
    """One Booking per reservation from its GPU slot rows."""
    grouped: dict[int, list[Row[Any]]] = {}
    for row in rows:
        grouped.setdefault(row.reservation_id, []).append(row)
    return [
        Booking(
            reservation_id,
            slots[0].owner,
            frozenset(s.gpu_uuid for s in slots),
            from_ms(slots[0].start_ms),
            from_ms(slots[0].end_ms),
        )
        for reservation_id, slots in grouped.items()
    ]


async def owner_bookings(
    conn: AsyncConnection, owner: str, start_ms: int, end_ms: int, exclude_id: int | None = None
) -> list[Booking]:
    rows = await slots_in_range(conn, start_ms, end_ms, owner=owner)
    return [b for b in bookings_from_slots(rows) if b.id != exclude_id]


async def member(conn: AsyncConnection, username: str) -> Member:
    """The user as access rules see them (name and groups); NotFound for an unknown user."""
    groups = await accounts.member_groups(conn, username)
    if groups is None:
        raise NotFound(f"no user named {username!r}", {"user": username})
    return Member(username, groups)
