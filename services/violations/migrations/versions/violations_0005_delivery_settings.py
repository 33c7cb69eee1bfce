"""violations: e-mail and chat delivery as admins set it in the web UI

Revision ID: violations_0005
Revises: violations_0004
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "violations_0005"
down_revision: str | None = "violations_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "violations_delivery_settings",
        sa.Column("channel", sa.String(16), primary_key=True),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("updated_by", sa.String(255), nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("violations_delivery_settings")
