"""The embedded metrics store: raw samples and 1-minute rollups in the monitor's database.

Works on SQLite (the embedded default) and PostgreSQL through SQLAlchemy async; the tables
are the monitor's own (`services/monitor/tables.py`, migration monitor_0002).

- Writes: one row per host tick and one per GPU per tick (a column per metric), inserted
  with one executemany per table in one transaction per batch. Writing a tick again changes
  nothing (the first write wins).
- Rollups: when a minute is complete it is aggregated from the raw rows into
  min/max/sum/count per metric (one INSERT ... SELECT ... GROUP BY, an upsert: computing a
  minute again replaces it, never adds to it). This happens on a write that reaches a later
  minute (`rollup_delay_s` after its end, to let late hosts arrive), and in `compact()` /
  `prune()`. Rows written late into a minute already rolled up make it roll up again.
- Retention (`prune(now)`): raw rows for `raw_retention_s`, rollups for `rollup_retention_s`;
  everything complete is rolled up before raw rows go.
- Reads (`series()`): bucket aggregation in SQL. A step under a minute reads raw rows where
  they still exist and rollups for the older part; a longer step reads rollups and raw rows
  only for the minutes not rolled up yet (see `buckets.rollups_until`). A rollup minute
  counts in the bucket where the minute starts, so steps over a minute are exact when they
  are whole minutes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from services.monitor import tables
from services.monitor.tsdb.base import (
    DEFAULT_RAW_RETENTION_S,
    DEFAULT_ROLLUP_RETENTION_S,
    GPU_METRICS,
    HOST_METRICS,
    Bucket,
    HostPoint,
    MetricsStore,
    check_points,
    check_query,
)
from services.monitor.tsdb.buckets import (
    MINUTE_MS,
    Partial,
    floor_minute,
    merge_buckets,
    retention_cutoffs,
    rollups_until,
    step_ms,
    to_ms,
)

# Rolling up or deleting a long span is done in slices of this many ms, one transaction each,
# so writers are never locked out for long.
_SLICE_MS = 3600 * 1000
_MINUTE: sa.ColumnClause[int] = sa.literal_column(str(MINUTE_MS), sa.BigInteger)


class _Kind:
    """The tables and columns of one kind of series (host or GPU)."""

    def __init__(
        self, raw: sa.Table, rollup: sa.Table, keys: tuple[str, ...], metrics: tuple[str, ...]
    ):
        self.raw = raw
        self.rollup = rollup
        self.keys = keys
        self.metrics = metrics


_HOST = _Kind(tables.host_samples, tables.host_rollup_1m, ("host",), HOST_METRICS)
_GPU = _Kind(tables.gpu_samples, tables.gpu_rollup_1m, ("host", "gpu_uuid"), GPU_METRICS)


class SqlMetricsStore(MetricsStore):
    def __init__(
        self,
        engine: AsyncEngine,
        *,
        raw_retention_s: float = DEFAULT_RAW_RETENTION_S,
        rollup_retention_s: float = DEFAULT_ROLLUP_RETENTION_S,
        compact_on_write: bool = True,
        rollup_delay_s: float = 30.0,
    ) -> None:
        """`engine` is the monitor's (migrated) engine; it stays the caller's to dispose."""
        self.engine = engine
        self.raw_retention_s = raw_retention_s
        self.rollup_retention_s = rollup_retention_s
        self.compact_on_write = compact_on_write
        self.rollup_delay_ms = round(rollup_delay_s * 1000)
        dialect = engine.dialect.name
        if dialect == "sqlite":
            self._insert: Any = sqlite.insert
        elif dialect == "postgresql":
            self._insert = postgresql.insert
        else:
            raise ValueError(f"SqlMetricsStore supports SQLite and PostgreSQL, not {dialect}")
        # Raw inserts go to the driver as plain SQL with one tuple per row: per-row parameter
        # processing in SQLAlchemy would cost more than the database does.
        self._insert_host_sql = self._raw_insert(_HOST)
        self._insert_gpu_sql = self._raw_insert(_GPU)
        # The first minute that may need rolling up (again); None: nothing pending.
        self._dirty_from: int | None = None
        self._started = False

    async def start(self) -> None:
        async with self.engine.connect() as conn:
            pending = [await self._pending_from(conn, kind) for kind in (_HOST, _GPU)]
        known = [minute for minute in pending if minute is not None]
        self._dirty_from = min(known) if known else None
        self._started = True

    async def close(self) -> None:
        self._started = False

    async def _pending_from(self, conn: AsyncConnection, kind: _Kind) -> int | None:
        """The first minute not rolled up yet, as far as the tables tell."""
        last = await conn.scalar(sa.select(sa.func.max(kind.rollup.c.minute_ms)))
        if last is not None:
            return int(last) + MINUTE_MS
        first = await conn.scalar(sa.select(sa.func.min(kind.raw.c.time_ms)))
        return None if first is None else floor_minute(int(first))

    def _raw_insert(self, kind: _Kind) -> str:
        """INSERT ... ON CONFLICT DO NOTHING of `kind`'s raw table, parameters in the order
        `write()` builds its tuples: series keys, time_ms, (gpu_index), metrics."""
        order = (*kind.keys, "time_ms", *(("gpu_index",) if kind is _GPU else ()), *kind.metrics)
        statement = self._insert(kind.raw).on_conflict_do_nothing()
        compiled = statement.compile(
            dialect=self.engine.dialect, column_keys=list(order), for_executemany=True
        )
        if tuple(compiled.positiontup or ()) != order:
            raise RuntimeError(
                f"unexpected parameter order for {kind.raw.name}: {compiled.positiontup}"
            )
        return compiled.string

    def _check_started(self) -> None:
        if not self._started:
            raise RuntimeError("SqlMetricsStore: call start() first")

    # --- writing ------------------------------------------------------------------------------

    async def write(self, points: Sequence[HostPoint]) -> None:
        self._check_started()
        check_points(points)
        if not points:
            return
        host_rows: list[tuple[Any, ...]] = []
        gpu_rows: list[tuple[Any, ...]] = []
        oldest = newest = to_ms(points[0].time)
        for point in points:
            t_ms = to_ms(point.time)
            oldest, newest = min(oldest, t_ms), max(newest, t_ms)
            host = point.host
            host_rows.append(
                (
                    host,
                    t_ms,
                    point.cpu_percent,
                    point.load_1m,
                    point.memory_used_mib,
                    point.memory_total_mib,
                )
            )
            gpu_rows += [
                (
                    host,
                    gpu.uuid,
                    t_ms,
                    gpu.index,
                    gpu.utilization_gpu_percent,
                    gpu.utilization_memory_percent,
                    gpu.memory_used_mib,
                    gpu.memory_total_mib,
                    gpu.temperature_c,
                    gpu.power_draw_w,
                    gpu.power_limit_w,
                    gpu.fan_speed_percent,
                    gpu.clock_sm_mhz,
                    gpu.clock_memory_mhz,
                )
                for gpu in point.gpus
            ]
        async with self.engine.begin() as conn:
            await conn.exec_driver_sql(self._insert_host_sql, host_rows)
            if gpu_rows:
                await conn.exec_driver_sql(self._insert_gpu_sql, gpu_rows)
        first_minute = floor_minute(oldest)
        if self._dirty_from is None or first_minute < self._dirty_from:
            self._dirty_from = first_minute
        if self.compact_on_write:
            complete = floor_minute(newest - self.rollup_delay_ms)
            if self._dirty_from < complete:
                await self._roll_up(self._dirty_from, complete)

    # --- rollups and retention ----------------------------------------------------------------

    async def compact(self, now: datetime, since: datetime | None = None) -> None:
        self._check_started()
        until = floor_minute(to_ms(now))
        candidates = [m for m in (self._dirty_from,) if m is not None]
        if since is not None:
            candidates.append(floor_minute(to_ms(since)))
        if candidates and min(candidates) < until:
            await self._roll_up(min(candidates), until)

    async def _roll_up(self, first_minute: int, until: int) -> None:
        """Recompute the rollups of the minutes in [first_minute, until) from the raw rows.

        Slice by slice where raw rows exist: a host clock far off does not make it walk years
        of empty hours."""
        lo = first_minute
        while lo < until:
            async with self.engine.connect() as conn:
                found = [
                    await conn.scalar(
                        sa.select(sa.func.min(kind.raw.c.time_ms)).where(
                            kind.raw.c.time_ms >= lo, kind.raw.c.time_ms < until
                        )
                    )
                    for kind in (_HOST, _GPU)
                ]
            present = [int(t) for t in found if t is not None]
            if not present:
                break
            lo = floor_minute(min(present))
            hi = min(lo + _SLICE_MS, until)
            async with self.engine.begin() as conn:
                for kind in (_HOST, _GPU):
                    await conn.execute(self._rollup_statement(kind, lo, hi))
            lo = hi
        if self._dirty_from is not None and self._dirty_from < until:
            self._dirty_from = until

    def _rollup_statement(self, kind: _Kind, lo: int, hi: int) -> Any:
        raw = kind.raw
        minute = raw.c.time_ms - raw.c.time_ms % _MINUTE
        columns: list[Any] = [raw.c[key] for key in kind.keys] + [minute.label("minute_ms")]
        names = [*kind.keys, "minute_ms"]
        if kind is _GPU:
            columns.append(sa.func.max(raw.c.gpu_index))
            names.append("gpu_index")
        for metric in kind.metrics:
            value = raw.c[metric]
            columns += [
                sa.func.min(value),
                sa.func.max(value),
                sa.func.sum(value),
                sa.func.count(value),
            ]
            names += [f"{metric}_min", f"{metric}_max", f"{metric}_sum", f"{metric}_count"]
        select = (
            sa.select(*columns)
            .where(raw.c.time_ms >= lo, raw.c.time_ms < hi)
            .group_by(*[raw.c[key] for key in kind.keys], minute)
        )
        insert = self._insert(kind.rollup).from_select(names, select)
        key_names = {*kind.keys, "minute_ms"}
        return insert.on_conflict_do_update(
            index_elements=[*kind.keys, "minute_ms"],
            set_={name: insert.excluded[name] for name in names if name not in key_names},
        )

    async def prune(self, now: datetime) -> None:
        self._check_started()
        await self.compact(now)
        raw_cutoff, rollup_cutoff = retention_cutoffs(
            to_ms(now), self.raw_retention_s, self.rollup_retention_s
        )
        for kind in (_HOST, _GPU):
            await self._delete_before(kind.raw, kind.raw.c.time_ms, raw_cutoff)
            await self._delete_before(kind.rollup, kind.rollup.c.minute_ms, rollup_cutoff)

    async def _delete_before(self, table: sa.Table, column: Any, cutoff: int) -> None:
        """Delete the rows before `cutoff`, a slice per transaction (writers get turns)."""
        while True:
            async with self.engine.connect() as conn:
                oldest = await conn.scalar(sa.select(sa.func.min(column)))
            if oldest is None or oldest >= cutoff:
                return
            async with self.engine.begin() as conn:
                await conn.execute(
                    sa.delete(table).where(column < min(int(oldest) + _SLICE_MS, cutoff))
                )

    # --- reading ------------------------------------------------------------------------------

    async def series(
        self,
        host: str,
        metric: str,
        start: datetime,
        end: datetime,
        step_s: float,
        gpu_uuid: str | None = None,
    ) -> list[Bucket]:
        self._check_started()
        kind = _GPU if check_query(metric, start, end, step_s, gpu_uuid) == "gpu" else _HOST
        start_ms, end_ms, step = to_ms(start), to_ms(end), step_ms(step_s)
        raw, rollup = kind.raw, kind.rollup

        def series_of(table: sa.Table) -> list[Any]:
            where = [table.c.host == host]
            if kind is _GPU:
                where.append(table.c.gpu_uuid == gpu_uuid)
            return where

        async with self.engine.connect() as conn:
            first_raw = last_rollup = None
            if step < MINUTE_MS:
                first_raw = await conn.scalar(
                    sa.select(sa.func.min(raw.c.time_ms)).where(
                        *series_of(raw), raw.c.time_ms >= start_ms, raw.c.time_ms < end_ms
                    )
                )
            else:
                last_rollup = await conn.scalar(
                    sa.select(sa.func.max(rollup.c.minute_ms)).where(
                        *series_of(rollup),
                        rollup.c.minute_ms >= start_ms,
                        rollup.c.minute_ms < end_ms,
                    )
                )
            split = rollups_until(
                step,
                start_ms,
                end_ms,
                None if first_raw is None else int(first_raw),
                None if last_rollup is None else int(last_rollup),
            )
            parts: list[tuple[int, Partial]] = []
            if split > start_ms:
                count = rollup.c[f"{metric}_count"]
                inner = (
                    sa.select(
                        ((rollup.c.minute_ms - start_ms) // step).label("b"),
                        rollup.c[f"{metric}_min"].label("lo"),
                        rollup.c[f"{metric}_max"].label("hi"),
                        rollup.c[f"{metric}_sum"].label("total"),
                        count.label("n"),
                    )
                    .where(
                        *series_of(rollup),
                        rollup.c.minute_ms >= start_ms,
                        rollup.c.minute_ms < split,
                        count > 0,
                    )
                    .subquery()
                )
                parts += await _partials(
                    conn,
                    sa.select(
                        inner.c.b,
                        sa.func.min(inner.c.lo),
                        sa.func.max(inner.c.hi),
                        sa.func.sum(inner.c.total),
                        sa.func.sum(inner.c.n),
                    ).group_by(inner.c.b),
                )
            if split < end_ms:
                value = raw.c[metric]
                inner = (
                    sa.select(((raw.c.time_ms - start_ms) // step).label("b"), value.label("v"))
                    .where(
                        *series_of(raw),
                        raw.c.time_ms >= max(start_ms, split),
                        raw.c.time_ms < end_ms,
                        value.is_not(None),
                    )
                    .subquery()
                )
                parts += await _partials(
                    conn,
                    sa.select(
                        inner.c.b,
                        sa.func.min(inner.c.v),
                        sa.func.max(inner.c.v),
                        sa.func.sum(inner.c.v),
                        sa.func.count(inner.c.v),
                    ).group_by(inner.c.b),
                )
        return merge_buckets(parts, start_ms, step)


async def _partials(conn: AsyncConnection, query: Any) -> list[tuple[int, Partial]]:
    rows = await conn.execute(query)
    return [
        (int(b), Partial(min=float(lo), max=float(hi), sum=float(total), count=int(n)))
        for b, lo, hi, total, n in rows
        if n
    ]
