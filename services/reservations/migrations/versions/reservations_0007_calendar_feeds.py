"""reservations: calendar-feed tokens (each user's secret iCalendar address)

Revision ID: reservations_0007
Revises: reservations_0006
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0007"
down_revision: str | None = "reservations_0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_calendar_feeds",
        sa.Column("username", sa.String(32), primary_key=True),
        sa.Column("token_hash", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reservations_calendar_feeds")
