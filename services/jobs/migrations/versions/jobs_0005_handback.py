"""jobs: hand-back and failures of queued jobs: how many times a job yielded its GPUs to a
reservation, whether its owner was told it ran past its time limit, and how its last run
failed (early: not retried; infrastructure: requeued) and why

Revision ID: jobs_0005_handback
Revises: jobs_0004
Create Date: 2026-11-27
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "jobs_0005_handback"
down_revision: str | None = "jobs_0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table("jobs_jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.add_column(sa.Column("interruptions", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(
            sa.Column("time_limit_told", sa.Boolean, nullable=False, server_default=sa.false())
        )
        batch.add_column(sa.Column("failure", sa.String(16), nullable=True))
        batch.add_column(sa.Column("failure_reason", sa.Text, nullable=True))


def downgrade() -> None:
    # Dropping a column rebuilds the table on SQLite: keep its AUTOINCREMENT (jobs_0003).
    with op.batch_alter_table("jobs_jobs", table_kwargs={"sqlite_autoincrement": True}) as batch:
        batch.drop_column("failure_reason")
        batch.drop_column("failure")
        batch.drop_column("time_limit_told")
        batch.drop_column("interruptions")
