"""reservations: the keys of creates (a create that comes again is answered, not refused)

Revision ID: reservations_0014_create_keys
Revises: reservations_0013_mig
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0014_create_keys"
down_revision: str | None = "reservations_0013_mig"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_create_keys",
        sa.Column("key", sa.String(320), primary_key=True),
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("fingerprint", sa.String(64), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "ix_reservations_create_keys_created", "reservations_create_keys", ["created_at_ms"]
    )


def downgrade() -> None:
    op.drop_index("ix_reservations_create_keys_created", "reservations_create_keys")
    op.drop_table("reservations_create_keys")
