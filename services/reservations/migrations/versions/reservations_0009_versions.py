"""reservations: version counters the service's in-memory model is checked against

`reservations_versions` holds one row: `directory` moves with every change to users, groups,
memberships, access rules and GPUs; `slots_freed` with every change to a GPU slot that can free
time (an update or delete of `reservations_gpu_slots`: a cancel, a shorter or moved booking).
Triggers move them in the transaction of the change, whoever makes it (another replica, an
admin's SQL), so a replica that reads them inside its write transaction knows whether what it
holds in memory is still the truth (services.reservations.booking.memory).

Revision ID: reservations_0009
Revises: reservations_0008
Create Date: 2026-11-24
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0009"
down_revision: str | None = "reservations_0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_DIRECTORY = (
    "reservations_users",
    "reservations_groups",
    "reservations_group_members",
    "reservations_access_rules",
    "reservations_gpus",
)
_SLOTS = "reservations_gpu_slots"


def _triggers() -> list[tuple[str, str, str]]:
    """(trigger name, table, column to move) for every watched table."""
    found = [(f"{table}_bump", table, "directory") for table in _DIRECTORY]
    return [*found, (f"{_SLOTS}_bump", _SLOTS, "slots_freed")]


def upgrade() -> None:
    versions = op.create_table(
        "reservations_versions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("directory", sa.BigInteger, nullable=False),
        sa.Column("slots_freed", sa.BigInteger, nullable=False),
    )
    op.bulk_insert(versions, [{"id": 1, "directory": 0, "slots_freed": 0}])
    postgresql = op.get_bind().dialect.name == "postgresql"
    for column in ("directory", "slots_freed"):
        if postgresql:  # one function per column; a statement-level trigger per table
            op.execute(
                f"CREATE FUNCTION reservations_bump_{column}() RETURNS trigger AS $$ "
                f"BEGIN UPDATE reservations_versions SET {column} = {column} + 1 WHERE id = 1; "
                "RETURN NULL; END $$ LANGUAGE plpgsql"
            )
    for name, table, column in _triggers():
        # New slots need no bump: another replica's booking is refused by the constraint.
        actions = ("UPDATE", "DELETE") if table == _SLOTS else ("INSERT", "UPDATE", "DELETE")
        if postgresql:
            op.execute(
                f"CREATE TRIGGER {name} AFTER {' OR '.join(actions)} ON {table} "
                f"FOR EACH STATEMENT EXECUTE PROCEDURE reservations_bump_{column}()"
            )
            continue
        for action in actions:
            op.execute(
                f"CREATE TRIGGER {name}_{action.lower()} AFTER {action} ON {table} "
                f"BEGIN UPDATE reservations_versions SET {column} = {column} + 1 "
                "WHERE id = 1; END"
            )


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name, table, _column in _triggers():
        if postgresql:
            op.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
        else:
            for action in ("insert", "update", "delete"):
                op.execute(f"DROP TRIGGER IF EXISTS {name}_{action}")
    if postgresql:
        for column in ("directory", "slots_freed"):
            op.execute(f"DROP FUNCTION IF EXISTS reservations_bump_{column}()")
    op.drop_table("reservations_versions")
