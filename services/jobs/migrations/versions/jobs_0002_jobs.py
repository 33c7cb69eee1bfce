"""jobs: jobs, their tasks, the history of task runs, and the event outbox

Revision ID: jobs_0002
Revises: jobs_0001
Create Date: 2026-11-21
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "jobs_0002"
down_revision: str | None = "jobs_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "jobs_jobs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(255), nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("spec", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("queued", sa.Boolean, nullable=False),
        sa.Column("enqueued_at_ms", sa.BigInteger, nullable=True),
        sa.Column("start_at_ms", sa.BigInteger, nullable=True),
        sa.Column("stop_at_ms", sa.BigInteger, nullable=True),
        sa.Column("reservation_id", sa.Integer, nullable=True),
        sa.Column("max_runtime_s", sa.Float, nullable=True),
        sa.Column("from_queue", sa.Boolean, nullable=False),
        sa.Column("stop_requested_at_ms", sa.BigInteger, nullable=True),
        sa.Column("stop_reason", sa.String(255), nullable=True),
        sa.Column("interrupted_for", sa.Text, nullable=False),
        sa.Column("waiting_reason", sa.Text, nullable=True),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("jobs_jobs_owner", "jobs_jobs", ["owner", "id"])
    op.create_index("jobs_jobs_status", "jobs_jobs", ["status"])
    op.create_table(
        "jobs_tasks",
        sa.Column(
            "job_id",
            sa.Integer,
            sa.ForeignKey("jobs_jobs.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("task_index", sa.Integer, primary_key=True),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("run", sa.Integer, nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("gpus", sa.Text, nullable=False),
        sa.Column("port", sa.Integer, nullable=True),
        sa.Column("pid", sa.Integer, nullable=True),
        sa.Column("started_at_ms", sa.BigInteger, nullable=True),
        sa.Column("ended_at_ms", sa.BigInteger, nullable=True),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("last_seen_at_ms", sa.BigInteger, nullable=True),
    )
    op.create_table(
        "jobs_runs",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column(
            "job_id", sa.Integer, sa.ForeignKey("jobs_jobs.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("task_index", sa.Integer, nullable=False),
        sa.Column("run", sa.Integer, nullable=False),
        sa.Column("host", sa.String(255), nullable=True),
        sa.Column("gpus", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("exit_code", sa.Integer, nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("started_at_ms", sa.BigInteger, nullable=True),
        sa.Column("ended_at_ms", sa.BigInteger, nullable=True),
    )
    op.create_index("jobs_runs_task", "jobs_runs", ["job_id", "task_index", "run"])
    op.create_table(
        "jobs_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("envelope", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("jobs_outbox")
    op.drop_index("jobs_runs_task", "jobs_runs")
    op.drop_table("jobs_runs")
    op.drop_table("jobs_tasks")
    op.drop_index("jobs_jobs_status", "jobs_jobs")
    op.drop_index("jobs_jobs_owner", "jobs_jobs")
    op.drop_table("jobs_jobs")
