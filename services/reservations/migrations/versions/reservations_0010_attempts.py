"""reservations: counted attempts (the gateway replicas' shared rate limits)

Revision ID: reservations_0010
Revises: reservations_0009
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0010"
down_revision: str | None = "reservations_0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_attempts",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("key", sa.String(320), nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("until_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_reservations_attempts_key_at", "reservations_attempts", ["key", "at_ms"])
    op.create_index("ix_reservations_attempts_until_ms", "reservations_attempts", ["until_ms"])


def downgrade() -> None:
    op.drop_index("ix_reservations_attempts_until_ms", "reservations_attempts")
    op.drop_index("ix_reservations_attempts_key_at", "reservations_attempts")
    op.drop_table("reservations_attempts")
