"""reservations: idle policies on access rules, idle states of running reservations

Revision ID: reservations_0008
Revises: reservations_0007
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0008"
down_revision: str | None = "reservations_0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A plain ADD COLUMN (SQLite too): the table keeps its AUTOINCREMENT.
    op.add_column("reservations_access_rules", sa.Column("idle_policy", sa.JSON, nullable=True))
    op.create_table(
        "reservations_idle",
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("owner", sa.String(32), nullable=False, index=True),
        sa.Column("since_ms", sa.BigInteger, nullable=True),
        sa.Column("notified_at_ms", sa.BigInteger, nullable=True),
        sa.Column("snoozed_until_ms", sa.BigInteger, nullable=True),
        sa.Column("notices", sa.Integer, nullable=False, server_default="0"),
        sa.Column("sent_notices", sa.Integer, nullable=False, server_default="0"),
        sa.Column("link_used_notice", sa.Integer, nullable=True),
        sa.Column("kept", sa.Integer, nullable=False, server_default="0"),
        sa.Column("outcome", sa.String(32), nullable=True),
        sa.Column("released_at_ms", sa.BigInteger, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reservations_idle")
    with op.batch_alter_table("reservations_access_rules") as batch:
        batch.drop_column("idle_policy")
