"""violations: incidents, their timeline of actions, and the event outbox

Revision ID: violations_0002
Revises: violations_0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "violations_0002"
down_revision: str | None = "violations_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "violations_incidents",
        sa.Column("id", sa.String(36), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_uuid", sa.String(128), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=True),
        sa.Column("offender", sa.String(255), nullable=False),
        sa.Column("mode", sa.String(16), nullable=False),
        sa.Column("reservation_id", sa.Integer, nullable=True),
        sa.Column("owner", sa.String(255), nullable=True),
        sa.Column("reservation_start_ms", sa.BigInteger, nullable=True),
        sa.Column("reservation_end_ms", sa.BigInteger, nullable=True),
        sa.Column("opened_at_ms", sa.BigInteger, nullable=False),
        sa.Column("since_ms", sa.BigInteger, nullable=False),
        sa.Column("last_seen_at_ms", sa.BigInteger, nullable=False),
        sa.Column("resolved_at_ms", sa.BigInteger, nullable=True),
        sa.Column("resolve_reason", sa.String(255), nullable=True),
        sa.Column("processes", sa.Text, nullable=False),
        sa.Column("steps", sa.Text, nullable=False),
    )
    op.create_index("violations_incidents_open", "violations_incidents", ["resolved_at_ms"])
    op.create_index("violations_incidents_opened", "violations_incidents", ["opened_at_ms"])
    op.create_table(
        "violations_actions",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "incident_id",
            sa.String(36),
            sa.ForeignKey("violations_incidents.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("step_index", sa.Integer, nullable=True),
        sa.Column("handler", sa.String(64), nullable=True),
        sa.Column("target", sa.String(512), nullable=True),
        sa.Column("ok", sa.Boolean, nullable=True),
        sa.Column("detail", sa.Text, nullable=False),
    )
    op.create_index("violations_actions_incident", "violations_actions", ["incident_id", "id"])
    op.create_table(
        "violations_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("envelope", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("violations_outbox")
    op.drop_index("violations_actions_incident", "violations_actions")
    op.drop_table("violations_actions")
    op.drop_index("violations_incidents_opened", "violations_incidents")
    op.drop_index("violations_incidents_open", "violations_incidents")
    op.drop_table("violations_incidents")
