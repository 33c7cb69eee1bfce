"""reservations: one-time set-up tokens (the first-run link that creates the first admin)

Revision ID: reservations_0006
Revises: reservations_0005
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0006"
down_revision: str | None = "reservations_0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_setup_tokens",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reservations_setup_tokens")
