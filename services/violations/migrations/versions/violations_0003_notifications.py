"""violations: notification preferences, sent keys (dedupe) and the record of what was sent

Revision ID: violations_0003
Revises: violations_0002
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "violations_0003"
down_revision: str | None = "violations_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "violations_notification_prefs",
        sa.Column("username", sa.String(255), primary_key=True),
        sa.Column("prefs", sa.Text, nullable=False),
        sa.Column("chat_format", sa.String(16), nullable=True),
        sa.Column("chat_url", sa.Text, nullable=True),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "violations_notification_keys",
        sa.Column("username", sa.String(255), primary_key=True),
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "violations_notifications_sent",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("username", sa.String(255), nullable=False),
        sa.Column("kind", sa.String(64), nullable=False),
        sa.Column("channel", sa.String(16), nullable=False),
        sa.Column("title", sa.String(200), nullable=False),
        sa.Column("outcome", sa.String(16), nullable=False),
        sa.Column("detail", sa.Text, nullable=False, server_default=""),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index(
        "violations_notifications_sent_user", "violations_notifications_sent", ["username", "id"]
    )


def downgrade() -> None:
    op.drop_index("violations_notifications_sent_user", "violations_notifications_sent")
    op.drop_table("violations_notifications_sent")
    op.drop_table("violations_notification_keys")
    op.drop_table("violations_notification_prefs")
