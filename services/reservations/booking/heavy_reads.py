"""SQL of the heavy reads (calendar, overview, earliest slot): fixed statements, plain rows.

Every statement's text is the same whatever the number of GPUs or reservations asked about:
a list travels as ONE parameter (`= ANY(:uuids)` on PostgreSQL, `IN (SELECT value FROM
json_each(:uuids))` on SQLite), so SQLAlchemy's compiled cache and asyncpg's prepared
statements are hit every time instead of an `IN (...)` of N parameters rendered per call.
Rows come back from the driver itself (asyncpg records, sqlite3 tuples), on the caller's
connection and inside its transaction, with only the columns used: thousands of rows per
answer would otherwise cost more in SQLAlchemy's result objects than in the database. The
calendar's answers are built straight from them (no record object per reservation).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.usage.totals import from_row, summary
from services.shared.storage.store import Store, from_ms

_OVERLAP = "s.end_ms > :start_ms AND s.start_ms < :end_ms"


def _any(column: str, param: str, dialect: str) -> str:
    if dialect == "postgresql":
        return f"{column} = ANY(:{param})"
    return f"{column} IN (SELECT value FROM json_each(:{param}))"


def _list(values: Sequence[Any], dialect: str) -> Any:
    return list(values) if dialect == "postgresql" else json.dumps(list(values))


_PARAM = re.compile(r":(\w+)")


@cache
def _positional(sql: str, dialect: str) -> tuple[str, tuple[str, ...]]:
    """`:name` parameters as the driver's own ($1.. on asyncpg, ? on sqlite3), and their order."""
    names: list[str] = []

    def place(match: re.Match[str]) -> str:
        names.append(match.group(1))
        return f"${len(names)}" if dialect == "postgresql" else "?"

    return _PARAM.sub(place, sql), tuple(names)


async def _fetch(conn: AsyncConnection, sql: str, params: dict[str, Any]) -> Sequence[Any]:
    """The rows of `sql` (named parameters), fetched by the driver on `conn`."""
    dialect = conn.dialect.name
    driver_sql, names = _positional(sql, dialect)
    values = [params[name] for name in names]
    driver = (await conn.get_raw_connection()).driver_connection
    if dialect == "postgresql":
        return await driver.fetch(driver_sql, *values)  # type: ignore[union-attr]
    return await driver.execute_fetchall(driver_sql, values)  # type: ignore[union-attr]


@cache
def _slots_sql(dialect: str, some_gpus: bool, owner: bool, active_only: bool) -> str:
    where = [_OVERLAP]
    if some_gpus:
        where.append(_any("s.gpu_uuid", "uuids", dialect))
    if owner:
        where.append("s.owner = :owner")
    if active_only:
        where.append("s.active = :active")
    return " AND ".join(where)


@cache
def _busy_statement(dialect: str, some_gpus: bool) -> str:
    return (
        "SELECT s.gpu_uuid, s.reservation_id, s.owner, s.start_ms, s.end_ms "
        "FROM reservations_gpu_slots s WHERE " + _slots_sql(dialect, some_gpus, False, True)
    )


def _range_params(
    start_ms: int, end_ms: int, gpu_uuids: Sequence[str] | None, dialect: str
) -> dict[str, Any]:
    params: dict[str, Any] = {"start_ms": start_ms, "end_ms": end_ms, "active": True}
    if gpu_uuids is not None:
        params["uuids"] = _list(gpu_uuids, dialect)
    return params


async def busy_slots(
    conn: AsyncConnection, start_ms: int, end_ms: int, gpu_uuids: Sequence[str] | None = None
) -> Sequence[tuple[str, int, str, int, int]]:
    """Active GPU slots overlapping [start, end): (gpu_uuid, reservation_id, owner, start_ms,
    end_ms), on the GPUs of `gpu_uuids` (all when None)."""
    dialect = conn.dialect.name
    return await _fetch(  # rows unpack as those tuples
        conn,
        _busy_statement(dialect, gpu_uuids is not None),
        _range_params(start_ms, end_ms, gpu_uuids, dialect),
    )


_VERSIONS = "SELECT directory, slots_freed FROM reservations_versions WHERE id = 1"


async def versions(conn: AsyncConnection) -> tuple[int, int]:
    """The `directory` and `slots_freed` counters of services/reservations/memory.py."""
    directory, freed = (await _fetch(conn, _VERSIONS, {}))[0]
    return int(directory), int(freed)


async def directory_version(conn: AsyncConnection) -> int:
    """The `directory` counter alone (what the reads' directory is checked against)."""
    return (await versions(conn))[0]


@cache
def _busy_and_version_statement(dialect: str, some_gpus: bool) -> str:
    # The counter comes as one more row, with no GPU (a slot always has one).
    return (
        "SELECT NULL, directory, NULL, NULL, NULL FROM reservations_versions WHERE id = 1 "
        "UNION ALL " + _busy_statement(dialect, some_gpus)
    )


BusyAndVersion = tuple[int, list[tuple[str, int, str, int, int]]]


async def busy_slots_and_directory_version(
    conn: AsyncConnection, start_ms: int, end_ms: int, gpu_uuids: Sequence[str] | None = None
) -> BusyAndVersion:
    """(the `directory` counter, `busy_slots`) read by one statement: one snapshot, one round
    trip for what an overview reads on every call."""
    dialect = conn.dialect.name
    rows = await _fetch(
        conn,
        _busy_and_version_statement(dialect, gpu_uuids is not None),
        _range_params(start_ms, end_ms, gpu_uuids, dialect),
    )
    return _split_version(rows)


def busy_slots_and_directory_version_now(
    store: Store, start_ms: int, end_ms: int, gpu_uuids: Sequence[str] | None = None
) -> BusyAndVersion | None:
    """The same, read at once on SQLite (`Store.read_now`); None where it cannot be."""
    sql, names = _positional(_busy_and_version_statement("sqlite", gpu_uuids is not None), "sqlite")
    params = _range_params(start_ms, end_ms, gpu_uuids, "sqlite")
    rows = store.read_now(sql, [params[name] for name in names])
    return None if rows is None else _split_version(rows)


def _split_version(rows: Sequence[Any]) -> BusyAndVersion:
    version = next(int(row[1]) for row in rows if row[0] is None)
    return version, [row for row in rows if row[0] is not None]


# --- the calendar -------------------------------------------------------------------------------

_RESERVATION_COLUMNS = (
    "r.id, r.owner, r.title, r.description, r.start_ms, r.end_ms, r.status, r.created_by, "
    "r.created_at_ms, r.updated_at_ms, r.cancelled_at_ms, r.cancelled_by, r.cancel_reason, "
    "r.cancelled_by_rules, r.usage"
)


@cache
def _calendar_statements(
    dialect: str, some_gpus: bool, owner: bool, active_only: bool
) -> tuple[str, str, str]:
    reservations = (
        f"SELECT {_RESERVATION_COLUMNS} FROM reservations r WHERE r.id IN "
        "(SELECT s.reservation_id FROM reservations_gpu_slots s WHERE "
        + _slots_sql(dialect, some_gpus, owner, active_only)
        + ") ORDER BY r.start_ms, r.id"
    )
    gpus = (
        "SELECT s.reservation_id, s.gpu_uuid, g.host, g.gpu_index, g.name "
        "FROM reservations_gpu_slots s LEFT JOIN reservations_gpus g ON g.uuid = s.gpu_uuid "
        "WHERE " + _any("s.reservation_id", "ids", dialect)
    )
    guests = "SELECT reservation_id, username FROM reservations_guests WHERE " + _any(
        "reservation_id", "ids", dialect
    )
    return reservations, gpus, guests


async def calendar(
    conn: AsyncConnection,
    start_ms: int,
    end_ms: int,
    gpu_uuids: Sequence[str] | None,
    *,
    owner: str | None,
    active_only: bool,
    now: int,
) -> list[dict[str, Any]]:
    """Reservations with a GPU slot overlapping [start, end) (on `gpu_uuids`, of `owner`,
    active only), by (start, id), as `ReservationRecord.to_dict` gives them (status `ended`
    once `now` passed an active one's end)."""
    dialect = conn.dialect.name
    found_sql, gpus_sql, guests_sql = _calendar_statements(
        dialect, gpu_uuids is not None, owner is not None, active_only
    )
    params = _range_params(start_ms, end_ms, gpu_uuids, dialect)
    if owner is not None:
        params["owner"] = owner
    if not active_only:
        del params["active"]
    rows = await _fetch(conn, found_sql, params)
    if not rows:
        return []
    ids = {"ids": _list([row[0] for row in rows], dialect)}
    gpus_of: dict[int, list[dict[str, Any]]] = {}
    for rid, uuid, host, index, name in await _fetch(conn, gpus_sql, ids):
        gpus_of.setdefault(rid, []).append(
            {"uuid": uuid, "host": "", "index": None, "name": ""}  # a GPU no longer known
            if host is None
            else {"uuid": uuid, "host": host, "index": index, "name": name}
        )
    guests_of: dict[int, list[str]] = {}
    for rid, username in await _fetch(conn, guests_sql, ids):
        guests_of.setdefault(rid, []).append(username)
    iso = _IsoCache()
    answers = []
    for (
        rid,
        owner_name,
        title,
        description,
        start,
        end,
        status,
        created_by,
        created_at,
        updated_at,
        cancelled_at,
        cancelled_by,
        cancel_reason,
        cancelled_by_rules,
        usage,
    ) in rows:
        if isinstance(usage, str):
            usage = json.loads(usage)
        refs = gpus_of.get(rid, [])
        refs.sort(key=_by_host_index)
        answers.append(
            {
                "id": rid,
                "owner": owner_name,
                "gpus": refs,
                "start": iso(start),
                "end": iso(end),
                "title": title,
                "description": description,
                "status": "ended" if status == "active" and end <= now else status,
                "created_by": created_by,
                "cancelled_at": iso(cancelled_at),
                "cancelled_by": cancelled_by,
                "cancel_reason": cancel_reason,
                "guests": sorted(guests_of.get(rid, ())),
                "updated_at": iso(updated_at),
                "created_at": iso(created_at),
                "cancelled_by_rules": bool(cancelled_by_rules),
                "usage": None if usage is None else summary(from_row(usage.get("totals") or {})),
            }
        )
    return answers


def _by_host_index(ref: dict[str, Any]) -> tuple[str, int, str]:
    # The order of `ReservationRecord._gpu_refs` (uuid order among equal keys), in Python: a
    # database's collation may order text differently.
    return (ref["host"], ref["index"] if ref["index"] is not None else -1, ref["uuid"])


class _IsoCache:
    """ISO text of millisecond times; a calendar repeats its starts and ends many times."""

    def __init__(self) -> None:
        self._known: dict[int, str] = {}

    def __call__(self, ms: int | None) -> str | None:
        if ms is None:
            return None
        text_ = self._known.get(ms)
        if text_ is None:
            text_ = self._known[ms] = from_ms(ms).isoformat()
        return text_
