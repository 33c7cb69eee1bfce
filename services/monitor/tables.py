"""Tables owned by the monitor service (only it reads or writes them).

Time series of the embedded metrics store (`tsdb.sqlite.SqlMetricsStore`): raw samples, one
row per host tick and one per GPU per tick with a column per metric (NULL: not reported), and
1-minute rollups with min / max / sum / count per metric, so averages over any span are exact
and a NULL never counts. Times are integer milliseconds since the Unix epoch (UTC): exact
bucket arithmetic in SQL, the same on SQLite and PostgreSQL.

Indexes: the primary keys serve the series queries, `(host, time_ms)` for hosts and
`(host, time_ms, gpu_uuid)` for GPUs (a query for one GPU walks its host's time range). Time
before the GPU keeps the GPUs of one tick side by side in the index, so a tick of a thousand
hosts touches a thousand index pages, not eight thousand: at 2 million rows that halves the
cost of a write on SQLite. `time_ms` / `minute_ms` alone are indexed for rollups and retention.
"""

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    Float,
    Index,
    Integer,
    MetaData,
    PrimaryKeyConstraint,
    String,
    Table,
    Text,
)

from services.monitor.tsdb.base import GPU_METRICS, HOST_METRICS
from services.shared.storage.db import applied_events_table

metadata = MetaData()

applied_events = applied_events_table(metadata, "monitor")

ROLLUP_SUFFIXES = ("min", "max", "sum", "count")


def _metric_columns(metrics: tuple[str, ...]) -> list[Column[float]]:
    return [Column(name, Float, nullable=True) for name in metrics]


def _rollup_columns(metrics: tuple[str, ...]) -> list[Column[float] | Column[int]]:
    columns: list[Column[float] | Column[int]] = []
    for name in metrics:
        columns += [
            Column(f"{name}_min", Float, nullable=True),
            Column(f"{name}_max", Float, nullable=True),
            Column(f"{name}_sum", Float, nullable=True),
            Column(f"{name}_count", Integer, nullable=False, server_default="0"),
        ]
    return columns


host_samples = Table(
    "monitor_host_samples",
    metadata,
    Column("host", String(255), nullable=False),
    Column("time_ms", BigInteger, nullable=False, autoincrement=False),
    *_metric_columns(HOST_METRICS),
    PrimaryKeyConstraint("host", "time_ms", name="pk_monitor_host_samples"),
    Index("ix_monitor_host_samples_time_ms", "time_ms"),
)

gpu_samples = Table(
    "monitor_gpu_samples",
    metadata,
    Column("host", String(255), nullable=False),
    Column("gpu_uuid", String(128), nullable=False),
    Column("time_ms", BigInteger, nullable=False, autoincrement=False),
    Column("gpu_index", Integer, nullable=False),
    *_metric_columns(GPU_METRICS),
    PrimaryKeyConstraint("host", "time_ms", "gpu_uuid", name="pk_monitor_gpu_samples"),
    Index("ix_monitor_gpu_samples_time_ms", "time_ms"),
)

host_rollup_1m = Table(
    "monitor_host_rollup_1m",
    metadata,
    Column("host", String(255), nullable=False),
    Column("minute_ms", BigInteger, nullable=False, autoincrement=False),
    *_rollup_columns(HOST_METRICS),
    PrimaryKeyConstraint("host", "minute_ms", name="pk_monitor_host_rollup_1m"),
    Index("ix_monitor_host_rollup_1m_minute_ms", "minute_ms"),
)

gpu_rollup_1m = Table(
    "monitor_gpu_rollup_1m",
    metadata,
    Column("host", String(255), nullable=False),
    Column("gpu_uuid", String(128), nullable=False),
    Column("minute_ms", BigInteger, nullable=False, autoincrement=False),
    Column("gpu_index", Integer, nullable=False),
    *_rollup_columns(GPU_METRICS),
    PrimaryKeyConstraint("host", "gpu_uuid", "minute_ms", name="pk_monitor_gpu_rollup_1m"),
    Index("ix_monitor_gpu_rollup_1m_minute_ms", "minute_ms"),
)

# The inventory: every host the monitor watches except this machine (see `inventory.py`).
# `removed` rows are tombstones: a host an admin removed, never seeded again from [[hosts]].
hosts = Table(
    "monitor_hosts",
    metadata,
    Column("name", String(63), primary_key=True),
    Column("address", String(255), nullable=False),
    Column("port", Integer, nullable=False),
    Column("user", String(64), nullable=False),
    Column("key_file", Text, nullable=False),
    Column("probe", String(8), nullable=False),
    Column("labels", Text, nullable=False),  # a JSON list
    Column("host_key", Text, nullable=False),  # empty: [ssh] known_hosts decides
    Column("source", String(8), nullable=False),
    Column("removed", Boolean, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

# GPU health (`gpu_health.py`): one row per GPU that is degraded or failed (an ok GPU has
# none), so a restarted monitor, or the replica a host moves to, goes on where it was
# (a failed GPU's wait for `healthy_for_s` included). Migration `monitor_0004_health`.
gpu_health = Table(
    "monitor_gpu_health",
    metadata,
    Column("uuid", String(96), primary_key=True),
    Column("host", String(63), nullable=False, index=True),
    Column("gpu_index", Integer, nullable=True),
    Column("state", String(16), nullable=False),
    Column("reason", Text, nullable=True),
    Column("since_ms", BigInteger, nullable=False),
    Column("healthy_since_ms", BigInteger, nullable=True),
)
