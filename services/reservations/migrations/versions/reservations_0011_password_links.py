"""reservations: accounts people run themselves (password links, must-change, deactivation)

Revision ID: reservations_0011
Revises: reservations_0010
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0011"
down_revision: str | None = "reservations_0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("reservations_users") as batch:
        batch.add_column(
            sa.Column("change_at_sign_in", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("deactivated_at_ms", sa.BigInteger, nullable=True))
    op.create_table(
        "reservations_password_links",
        sa.Column("token_hash", sa.String(64), primary_key=True),
        sa.Column("username", sa.String(32), nullable=False, unique=True),
        sa.Column("purpose", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("reservations_password_links")
    with op.batch_alter_table("reservations_users") as batch:
        batch.drop_column("deactivated_at_ms")
        batch.drop_column("change_at_sign_in")
