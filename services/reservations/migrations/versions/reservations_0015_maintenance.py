"""reservations: maintenance windows (a host or some of its GPUs drained, with a reason)

Revision ID: reservations_0015_maintenance
Revises: reservations_0014_create_keys
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0015_maintenance"
down_revision: str | None = "reservations_0014_create_keys"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_maintenance",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("host", sa.String(253), nullable=False),
        sa.Column("gpu_indices", sa.String(400), nullable=True),
        sa.Column("start_ms", sa.BigInteger, nullable=False),
        sa.Column("end_ms", sa.BigInteger, nullable=True),
        sa.Column("reason", sa.String(500), nullable=False),
        sa.Column("bookings", sa.String(8), nullable=False, server_default="keep"),
        sa.Column("stop_jobs", sa.Boolean, nullable=False, server_default=sa.false()),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("ended_by", sa.String(32), nullable=True),
    )
    op.create_index("ix_reservations_maintenance_end_ms", "reservations_maintenance", ["end_ms"])


def downgrade() -> None:
    op.drop_index("ix_reservations_maintenance_end_ms", "reservations_maintenance")
    op.drop_table("reservations_maintenance")
