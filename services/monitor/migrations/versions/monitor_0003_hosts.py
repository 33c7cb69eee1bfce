"""monitor: the inventory of hosts (seeded from [[hosts]], managed through the API)

Revision ID: monitor_0003
Revises: monitor_0002
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "monitor_0003"
down_revision: str | None = "monitor_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "monitor_hosts",
        sa.Column("name", sa.String(63), primary_key=True),
        sa.Column("address", sa.String(255), nullable=False),
        sa.Column("port", sa.Integer, nullable=False),
        sa.Column("user", sa.String(64), nullable=False),
        sa.Column("key_file", sa.Text, nullable=False),
        sa.Column("probe", sa.String(8), nullable=False),
        sa.Column("labels", sa.Text, nullable=False),
        sa.Column("host_key", sa.Text, nullable=False),
        sa.Column("source", sa.String(8), nullable=False),
        sa.Column("removed", sa.Boolean, nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("monitor_hosts")
