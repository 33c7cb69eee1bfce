"""reservations: access rules may select GPUs by their hardware labels

Revision ID: reservations_0012_labels
Revises: reservations_0011
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0012_labels"
down_revision: str | None = "reservations_0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reservations_access_rules") as batch:
        batch.add_column(sa.Column("labels", sa.JSON, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reservations_access_rules") as batch:
        batch.drop_column("labels")
