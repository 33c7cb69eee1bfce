"""jobs: ids of jobs are never reused on SQLite (AUTOINCREMENT)

Without it SQLite gives a new row the highest id + 1, so deleting the newest of the jobs
gave its id to the next one, and a link or a plugin that kept the id pointed at another.
PostgreSQL's sequences never reuse an id: nothing to do there. SQLite takes AUTOINCREMENT
only when a table is created, so the table is rebuilt (rows, indexes and constraints kept).

Revision ID: jobs_0003
Revises: jobs_0002
Create Date: 2026-11-24
"""

from collections.abc import Sequence

from alembic import op

revision: str = "jobs_0003"
down_revision: str | None = "jobs_0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "jobs_jobs", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
