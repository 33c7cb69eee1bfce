"""monitor: each degraded or failed GPU's health, kept across restarts

Revision ID: monitor_0004_health
Revises: monitor_0003
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "monitor_0004_health"
down_revision: str | None = "monitor_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "monitor_gpu_health",
        sa.Column("uuid", sa.String(96), primary_key=True),
        sa.Column("host", sa.String(63), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("since_ms", sa.BigInteger, nullable=False),
        sa.Column("healthy_since_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_monitor_gpu_health_host", "monitor_gpu_health", ["host"])


def downgrade() -> None:
    op.drop_index("ix_monitor_gpu_health_host", table_name="monitor_gpu_health")
    op.drop_table("monitor_gpu_health")
