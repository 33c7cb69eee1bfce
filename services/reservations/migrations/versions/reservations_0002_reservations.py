"""reservations: users, groups, GPUs, access rules, reservations, outbox

The invariant "no two active reservations overlap on one GPU" is enforced here, by the
database: an exclusion constraint on PostgreSQL (btree_gist), triggers on SQLite.

Creates the default group `users` (joined by every new user) and the rule that lets it use
every GPU at any time, as a newcomer expects; admins narrow or remove it.

Revision ID: reservations_0002
Revises: reservations_0001
Create Date: 2026-11-21
"""

import time
from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "reservations_0002"
down_revision: str | None = "reservations_0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_OVERLAP = """
    EXISTS (SELECT 1 FROM reservations_gpu_slots AS other
            WHERE other.active AND other.gpu_uuid = NEW.gpu_uuid
              AND other.reservation_id <> NEW.reservation_id
              AND other.start_ms < NEW.end_ms AND other.end_ms > NEW.start_ms)
"""


def upgrade() -> None:
    op.create_table(
        "reservations_users",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("username", sa.String(32), nullable=False, unique=True),
        sa.Column("email", sa.String(254), nullable=False),
        sa.Column("password_hash", sa.String(255), nullable=False),
        sa.Column("is_admin", sa.Boolean, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    groups = op.create_table(
        "reservations_groups",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("description", sa.String(500), nullable=False),
        sa.Column("is_default", sa.Boolean, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "reservations_group_members",
        sa.Column(
            "group_id",
            sa.Integer,
            sa.ForeignKey("reservations_groups.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column(
            "user_id",
            sa.Integer,
            sa.ForeignKey("reservations_users.id", ondelete="CASCADE"),
            primary_key=True,
        ),
    )
    op.create_index("ix_reservations_group_members_user", "reservations_group_members", ["user_id"])
    op.create_table(
        "reservations_gpus",
        sa.Column("uuid", sa.String(96), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("gpu_index", sa.Integer, nullable=False),
        sa.Column("name", sa.String(255), nullable=False),
        sa.Column("memory_total_mib", sa.Float, nullable=True),
        sa.Column("present", sa.Boolean, nullable=False),
        sa.Column("first_seen_ms", sa.BigInteger, nullable=False),
        sa.Column("last_change_ms", sa.BigInteger, nullable=False),
    )
    op.create_index("ix_reservations_gpus_host", "reservations_gpus", ["host", "gpu_index"])
    rules = op.create_table(
        "reservations_access_rules",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("description", sa.String(500), nullable=False),
        sa.Column("users", sa.JSON, nullable=False),
        sa.Column("groups", sa.JSON, nullable=False),
        sa.Column("all_gpus", sa.Boolean, nullable=False),
        sa.Column("hosts", sa.JSON, nullable=False),
        sa.Column("gpus", sa.JSON, nullable=False),
        sa.Column("valid_from_ms", sa.BigInteger, nullable=False),
        sa.Column("valid_until_ms", sa.BigInteger, nullable=True),
        sa.Column("windows", sa.JSON, nullable=False),
        sa.Column("timezone", sa.String(64), nullable=False),
        sa.Column("max_gpus", sa.Integer, nullable=True),
        sa.Column("max_duration_s", sa.Integer, nullable=True),
        sa.Column("max_gpu_hours_per_week", sa.Float, nullable=True),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
    )
    op.create_table(
        "reservations",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("title", sa.String(100), nullable=False),
        sa.Column("description", sa.Text, nullable=False),
        sa.Column("start_ms", sa.BigInteger, nullable=False),
        sa.Column("end_ms", sa.BigInteger, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_by", sa.String(32), nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
        sa.Column("updated_at_ms", sa.BigInteger, nullable=False),
        sa.Column("cancelled_at_ms", sa.BigInteger, nullable=True),
        sa.Column("cancelled_by", sa.String(32), nullable=True),
        sa.Column("cancel_reason", sa.Text, nullable=True),
        sa.Column("cancelled_by_rules", sa.Boolean, nullable=False),
        sa.Column("started_event_ms", sa.BigInteger, nullable=True),
        sa.Column("ended_event_ms", sa.BigInteger, nullable=True),
        sa.Column("usage", sa.JSON, nullable=True),
    )
    op.create_index("ix_reservations_owner_end", "reservations", ["owner", "end_ms"])
    op.create_index("ix_reservations_status_start", "reservations", ["status", "start_ms"])
    op.create_index("ix_reservations_status_end", "reservations", ["status", "end_ms"])
    op.create_table(
        "reservations_gpu_slots",
        sa.Column(
            "reservation_id",
            sa.Integer,
            sa.ForeignKey("reservations.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("gpu_uuid", sa.String(96), primary_key=True),
        sa.Column("owner", sa.String(32), nullable=False),
        sa.Column("start_ms", sa.BigInteger, nullable=False),
        sa.Column("end_ms", sa.BigInteger, nullable=False),
        sa.Column("active", sa.Boolean, nullable=False),
    )
    op.create_index(
        "ix_reservations_gpu_slots_gpu_end", "reservations_gpu_slots", ["gpu_uuid", "end_ms"]
    )
    op.create_table(
        "reservations_outbox",
        sa.Column("id", sa.Integer, primary_key=True, autoincrement=True),
        sa.Column("envelope", sa.Text, nullable=False),
        sa.Column("created_at_ms", sa.BigInteger, nullable=False),
    )

    if op.get_bind().dialect.name == "postgresql":
        op.execute("CREATE EXTENSION IF NOT EXISTS btree_gist")
        op.execute(
            "ALTER TABLE reservations_gpu_slots ADD CONSTRAINT reservations_no_overlap "
            "EXCLUDE USING gist (gpu_uuid WITH =, int8range(start_ms, end_ms) WITH &&) "
            "WHERE (active)"
        )
    else:
        for action in ("INSERT", "UPDATE"):
            op.execute(
                f"CREATE TRIGGER reservations_no_overlap_{action.lower()} "
                f"BEFORE {action} ON reservations_gpu_slots "
                f"WHEN NEW.active AND {_OVERLAP} "
                "BEGIN SELECT RAISE(ABORT, 'reservations_no_overlap'); END"
            )

    now_ms = int(time.time() * 1000)
    op.bulk_insert(
        groups,
        [
            {
                "id": 1,
                "name": "users",
                "description": "Everyone: new users join it.",
                "is_default": True,
                "created_at_ms": now_ms,
            }
        ],
    )
    op.bulk_insert(
        rules,
        [
            {
                "name": "users: every GPU, any time",
                "description": "Created with the database; narrow or remove it.",
                "users": [],
                "groups": ["users"],
                "all_gpus": True,
                "hosts": [],
                "gpus": [],
                "valid_from_ms": 0,
                "valid_until_ms": None,
                "windows": [],
                "timezone": "UTC",
                "created_by": "warden",
                "created_at_ms": now_ms,
                "updated_at_ms": now_ms,
            }
        ],
    )
    if op.get_bind().dialect.name == "postgresql":
        # The explicit id above does not move the sequence.
        op.execute(
            "SELECT setval(pg_get_serial_sequence('reservations_groups', 'id'), "
            "(SELECT max(id) FROM reservations_groups))"
        )


def downgrade() -> None:
    for table in (
        "reservations_outbox",
        "reservations_gpu_slots",
        "reservations",
        "reservations_access_rules",
        "reservations_gpus",
        "reservations_group_members",
        "reservations_groups",
        "reservations_users",
    ):
        op.drop_table(table)
