"""reservations: refresh-token sessions (login, rotation, family revocation)

Revision ID: reservations_0004
Revises: reservations_0003
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0004"
down_revision: str | None = "reservations_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_sessions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("family", sa.String(32), nullable=False),
        sa.Column("username", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
        sa.Column("rotated_at_ms", sa.BigInteger, nullable=True),
        sa.Column("revoked_at_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("ix_reservations_sessions_family", "reservations_sessions", ["family"])
    op.create_index("ix_reservations_sessions_username", "reservations_sessions", ["username"])


def downgrade() -> None:
    op.drop_table("reservations_sessions")
