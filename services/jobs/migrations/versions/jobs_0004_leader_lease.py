"""jobs: the leader lease (several replicas, one active: services/shared/cluster/leadership.py), and
the signals of a job's stop already sent (so a new leader sends none twice)

Revision ID: jobs_0004
Revises: jobs_0003
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "jobs_0004"
down_revision: str | None = "jobs_0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs_leader_lease",
        sa.Column("service", sa.String(64), primary_key=True),
        sa.Column("holder", sa.String(255), nullable=False),
        sa.Column("token", sa.BigInteger, nullable=False),
        sa.Column("expires_at_ms", sa.BigInteger, nullable=False),
    )
    with op.batch_alter_table("jobs_jobs") as batch:
        batch.add_column(
            sa.Column("signals_sent", sa.String(32), nullable=False, server_default="")
        )


def downgrade() -> None:
    # Dropping a column rebuilds the table on SQLite: keep its AUTOINCREMENT (jobs_0003).
    with op.batch_alter_table("jobs_jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("signals_sent")
    op.drop_table("jobs_leader_lease")
