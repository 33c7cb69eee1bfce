"""monitor: embedded metrics store (raw samples and 1-minute rollups)

Revision ID: monitor_0002
Revises: monitor_0001
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "monitor_0002"
down_revision: str | None = "monitor_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The metrics as of this revision (a migration never imports the models it predates).
HOST_METRICS = ("cpu_percent", "load_1m", "memory_used_mib", "memory_total_mib")
GPU_METRICS = (
    "utilization_gpu_percent",
    "utilization_memory_percent",
    "memory_used_mib",
    "memory_total_mib",
    "temperature_c",
    "power_draw_w",
    "power_limit_w",
    "fan_speed_percent",
    "clock_sm_mhz",
    "clock_memory_mhz",
)


def _metric_columns(metrics: tuple[str, ...]) -> list[sa.Column]:
    return [sa.Column(name, sa.Float, nullable=True) for name in metrics]


def _rollup_columns(metrics: tuple[str, ...]) -> list[sa.Column]:
    columns: list[sa.Column] = []
    for name in metrics:
        columns += [
            sa.Column(f"{name}_min", sa.Float, nullable=True),
            sa.Column(f"{name}_max", sa.Float, nullable=True),
            sa.Column(f"{name}_sum", sa.Float, nullable=True),
            sa.Column(f"{name}_count", sa.Integer, nullable=False, server_default="0"),
        ]
    return columns


def upgrade() -> None:
    op.create_table(
        "monitor_host_samples",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("time_ms", sa.BigInteger, nullable=False, autoincrement=False),
        *_metric_columns(HOST_METRICS),
        sa.PrimaryKeyConstraint("host", "time_ms", name="pk_monitor_host_samples"),
    )
    op.create_index("ix_monitor_host_samples_time_ms", "monitor_host_samples", ["time_ms"])

    op.create_table(
        "monitor_gpu_samples",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(128), nullable=False),
        sa.Column("time_ms", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("gpu_index", sa.Integer, nullable=False),
        *_metric_columns(GPU_METRICS),
        sa.PrimaryKeyConstraint("host", "time_ms", "gpu_uuid", name="pk_monitor_gpu_samples"),
    )
    op.create_index("ix_monitor_gpu_samples_time_ms", "monitor_gpu_samples", ["time_ms"])

    op.create_table(
        "monitor_host_rollup_1m",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("minute_ms", sa.BigInteger, nullable=False, autoincrement=False),
        *_rollup_columns(HOST_METRICS),
        sa.PrimaryKeyConstraint("host", "minute_ms", name="pk_monitor_host_rollup_1m"),
    )
    op.create_index("ix_monitor_host_rollup_1m_minute_ms", "monitor_host_rollup_1m", ["minute_ms"])

    op.create_table(
        "monitor_gpu_rollup_1m",
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(128), nullable=False),
        sa.Column("minute_ms", sa.BigInteger, nullable=False, autoincrement=False),
        sa.Column("gpu_index", sa.Integer, nullable=False),
        *_rollup_columns(GPU_METRICS),
        sa.PrimaryKeyConstraint("host", "gpu_uuid", "minute_ms", name="pk_monitor_gpu_rollup_1m"),
    )
    op.create_index("ix_monitor_gpu_rollup_1m_minute_ms", "monitor_gpu_rollup_1m", ["minute_ms"])


def downgrade() -> None:
    op.drop_index("ix_monitor_gpu_rollup_1m_minute_ms", "monitor_gpu_rollup_1m")
    op.drop_table("monitor_gpu_rollup_1m")
    op.drop_index("ix_monitor_host_rollup_1m_minute_ms", "monitor_host_rollup_1m")
    op.drop_table("monitor_host_rollup_1m")
    op.drop_index("ix_monitor_gpu_samples_time_ms", "monitor_gpu_samples")
    op.drop_table("monitor_gpu_samples")
    op.drop_index("ix_monitor_host_samples_time_ms", "monitor_host_samples")
    op.drop_table("monitor_host_samples")
