"""reservations: MIG instances are GPUs with a parent

Revision ID: reservations_0013_mig
Revises: reservations_0012_labels
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0013_mig"
down_revision: str | None = "reservations_0012_labels"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reservations_gpus") as batch:
        batch.add_column(sa.Column("mig_parent_uuid", sa.String(96), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("reservations_gpus") as batch:
        batch.drop_column("mig_parent_uuid")
