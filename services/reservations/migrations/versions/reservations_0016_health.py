"""reservations: each GPU's health as the monitor reports it (failed GPUs take no booking)

`op.add_column`, not a batch: SQLite adds the columns in place and keeps the table's
triggers (reservations_0009's version counters).

Revision ID: reservations_0016_health
Revises: reservations_0015_maintenance
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0016_health"
down_revision: str | None = "reservations_0015_maintenance"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "reservations_gpus",
        sa.Column("health", sa.String(16), nullable=False, server_default="ok"),
    )
    op.add_column("reservations_gpus", sa.Column("health_reason", sa.Text, nullable=True))
    op.add_column("reservations_gpus", sa.Column("health_since_ms", sa.BigInteger, nullable=True))


def downgrade() -> None:
    for column in ("health_since_ms", "health_reason", "health"):
        op.drop_column("reservations_gpus", column)
