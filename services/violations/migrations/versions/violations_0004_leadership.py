"""violations: the leader lease and the handlers' step claims (several replicas, one active)

Revision ID: violations_0004
Revises: violations_0003
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "violations_0004"
down_revision: str | None = "violations_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "violations_leader_lease",
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "violations_step_claims",
        sa.Column(
            "incident_id",
            sa.String(36),
            sa.ForeignKey("violations_incidents.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("step_index", sa.Integer, primary_key=True),
        sa.Column("handler", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("violations_step_claims")
    op.drop_table("violations_leader_lease")
