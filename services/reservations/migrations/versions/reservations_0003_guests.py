"""reservations: guests of a reservation (users who may use its GPUs too)

A shared booking: the violations service does not flag the guests' processes on the
reservation's GPUs. Existing reservations have no guests.

Revision ID: reservations_0003
Revises: reservations_0002
Create Date: 2026-11-28
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0003"
down_revision: str | None = "reservations_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "reservations_guests",
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("username", sa.String(32), primary_key=True),
    )


def downgrade() -> None:
    op.drop_table("reservations_guests")
