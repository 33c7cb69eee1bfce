"""Tables owned by the reservations service (only it reads or writes them).

Times are integer milliseconds since the Unix epoch (UTC), as in the monitor's tables: exact
interval arithmetic in SQL, the same on SQLite and PostgreSQL, and cheap to compare.

The invariant "no two active reservations overlap on one GPU" lives in
`reservations_gpu_slots` (one row per reserved GPU, carrying its reservation's interval and
whether it is active). The database enforces it: on PostgreSQL with an exclusion constraint
(btree_gist), on SQLite with triggers that abort an overlapping insert or update; the service
also writes inside a serialised transaction on SQLite. Both are created by migration
`reservations_0002`; `reservations_0003` adds the guests of shared bookings,
`reservations_0004` the refresh-token sessions, `reservations_0006` the set-up tokens,
`reservations_0007` the calendar-feed tokens, `reservations_0008` the idle policies and states,
`reservations_0009` the version counters (and their triggers) of the in-memory model,
`reservations_0010` the counted attempts of the rate limits.
"""

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    Column,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
    false,
)

from services.shared.storage.db import applied_events_table
from services.shared.storage.outbox import outbox_table

metadata = MetaData()

applied_events = applied_events_table(metadata, "reservations")

users = Table(
    "reservations_users",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # The user's UNIX username on the hosts: what processes are matched against.
    Column("username", String(32), nullable=False, unique=True),
    Column("email", String(254), nullable=False),
    Column("password_hash", String(255), nullable=False),
    Column("is_admin", Boolean, nullable=False, default=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    # An admin chose the password: the user is asked for their own at sign-in.
    Column("change_at_sign_in", Boolean, nullable=False, default=False, server_default=false()),
    # Deactivated accounts keep their history but cannot sign in (null: active).
    Column("deactivated_at_ms", BigInteger, nullable=True),
)

groups = Table(
    "reservations_groups",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(64), nullable=False, unique=True),
    Column("description", String(500), nullable=False, default=""),
    # New users join every default group.
    Column("is_default", Boolean, nullable=False, default=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

group_members = Table(
    "reservations_group_members",
    metadata,
    Column(
        "group_id",
        Integer,
        ForeignKey("reservations_groups.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column(
        "user_id",
        Integer,
        ForeignKey("reservations_users.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Index("ix_reservations_group_members_user", "user_id"),
)

gpus = Table(
    "reservations_gpus",
    metadata,
    Column("uuid", String(96), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("gpu_index", Integer, nullable=False),
    Column("name", String(255), nullable=False, default=""),
    Column("memory_total_mib", Float, nullable=True),
    # False once the monitor reports it missing; it stays known with its reservations.
    Column("present", Boolean, nullable=False, default=True),
    Column("mig_parent_uuid", String(96), nullable=True),  # a MIG instance: its GPU
    Column("first_seen_ms", BigInteger, nullable=False),
    Column("last_change_ms", BigInteger, nullable=False),
    # The monitor's gpu.health_changed (reservations_0016_health): ok, degraded or failed (a
    # failed GPU takes no new booking), why, and since when.
    Column("health", String(16), nullable=False, server_default="ok"),
    Column("health_reason", Text, nullable=True),
    Column("health_since_ms", BigInteger, nullable=True),
    Index("ix_reservations_gpus_host", "host", "gpu_index"),
)

access_rules = Table(
    "reservations_access_rules",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("name", String(128), nullable=False),
    Column("description", String(500), nullable=False, default=""),
    # Subjects and objects are short lists of names, read whole with the rule.
    Column("users", JSON, nullable=False),  # usernames
    Column("groups", JSON, nullable=False),  # group names
    Column("all_gpus", Boolean, nullable=False, default=False),
    Column("hosts", JSON, nullable=False),
    Column("gpus", JSON, nullable=False),  # GPU uuids
    # A label selector (services.shared.gpu_labels): ["model=A100-80GB"]; NULL or []: none.
    Column("labels", JSON, nullable=True),
    Column("valid_from_ms", BigInteger, nullable=False),
    Column("valid_until_ms", BigInteger, nullable=True),
    # [{"days": [0..6], "start": "HH:MM", "end": "HH:MM"}] in `timezone`; empty: any time.
    Column("windows", JSON, nullable=False),
    Column("timezone", String(64), nullable=False, default="UTC"),
    Column("max_gpus", Integer, nullable=True),
    Column("max_duration_s", Integer, nullable=True),
    Column("max_gpu_hours_per_week", Float, nullable=True),
    # {below_util_percent, below_memory_mib, for_minutes, grace_minutes, snooze_minutes}
    # (services.reservations.idle.policy); NULL: reservations it grants are never released as idle.
    Column("idle_policy", JSON, nullable=True),
    Column("created_by", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    sqlite_autoincrement=True,  # a deleted rule's id is never given to another
)

reservations = Table(
    "reservations",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("owner", String(32), nullable=False),
    Column("title", String(100), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("start_ms", BigInteger, nullable=False),
    Column("end_ms", BigInteger, nullable=False),
    # active | cancelled (cancelled ones are kept, with who, when and why)
    Column("status", String(16), nullable=False),
    Column("created_by", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Column("cancelled_at_ms", BigInteger, nullable=True),
    Column("cancelled_by", String(32), nullable=True),
    Column("cancel_reason", Text, nullable=True),
    # Cancelled by an access change (not by a person): restored if allowed and free again.
    Column("cancelled_by_rules", Boolean, nullable=False, default=False),
    # When reservation.started / .ended were emitted (NULL: not yet); survives restarts.
    Column("started_event_ms", BigInteger, nullable=True),
    Column("ended_event_ms", BigInteger, nullable=True),
    # Usage statistics (services.reservations.usage.totals totals); frozen once it ended.
    Column("usage", JSON, nullable=True),
    Index("ix_reservations_owner_end", "owner", "end_ms"),
    Index("ix_reservations_status_start", "status", "start_ms"),
    Index("ix_reservations_status_end", "status", "end_ms"),
)

gpu_slots = Table(
    "reservations_gpu_slots",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("gpu_uuid", String(96), primary_key=True),
    # Copies of the reservation's owner, interval and state: one index answers conflicts,
    # calendars and the overview without a join.
    Column("owner", String(32), nullable=False),
    Column("start_ms", BigInteger, nullable=False),
    Column("end_ms", BigInteger, nullable=False),
    Column("active", Boolean, nullable=False),
    Index("ix_reservations_gpu_slots_gpu_end", "gpu_uuid", "end_ms"),
)

# Users who may use a reservation's GPUs too (a shared booking): the violations service does
# not flag their processes. The owner is never one of them. Quotas and rules count the owner's
# reservation only.
guests = Table(
    "reservations_guests",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("username", String(32), primary_key=True),
)

# Refresh tokens of signed-in sessions, by hash (the token itself is never stored). Each login
# starts a family; a refresh replaces the token with the next one of its family, and a token
# presented again after it was replaced revokes the whole family (it was stolen or replayed).
sessions = Table(
    "reservations_sessions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("family", String(32), nullable=False, index=True),
    Column("username", String(32), nullable=False, index=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Column("rotated_at_ms", BigInteger, nullable=True),
    Column("revoked_at_ms", BigInteger, nullable=True),
)

# One-time set-up tokens (the first-run link), by hash: each creates the first admin once, and
# every one stops working when an admin exists.
setup_tokens = Table(
    "reservations_setup_tokens",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("created_at_ms", BigInteger, nullable=False),
)

# One-time password links (an invitation, or a reset an admin asked for), by hash: at most one
# per user (a new one replaces it); using one sets the password and deletes it.
password_links = Table(
    "reservations_password_links",
    metadata,
    Column("token_hash", String(64), primary_key=True),
    Column("username", String(32), nullable=False, unique=True),
    Column("purpose", String(16), nullable=False),  # invite | reset
    Column("created_by", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
)

# The secret of each user's calendar feed (`/calendar/{token}.ics`), by hash: at most one per
# user (a new one replaces it); deleting the row revokes the old address at once.
calendar_feeds = Table(
    "reservations_calendar_feeds",
    metadata,
    Column("username", String(32), primary_key=True),
    Column("token_hash", String(64), nullable=False, unique=True),
    Column("created_at_ms", BigInteger, nullable=False),
)

# Idle state of running reservations (`idle.policy`), kept so a restarted service
# neither tells an owner twice nor skips a release, and the answers for the admins' counts.
idle_states = Table(
    "reservations_idle",
    metadata,
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("owner", String(32), nullable=False, index=True),
    Column("since_ms", BigInteger, nullable=True),
    Column("notified_at_ms", BigInteger, nullable=True),
    Column("snoozed_until_ms", BigInteger, nullable=True),
    Column("notices", Integer, nullable=False, default=0),
    # Notices the notification path took: fewer than `notices` means one is to be sent again.
    Column("sent_notices", Integer, nullable=False, default=0),
    # The notice whose link was used (a link works once; a later notice signs new ones).
    Column("link_used_notice", Integer, nullable=True),
    Column("kept", Integer, nullable=False, default=0),  # "I still need it" answers
    # released_idle (no answer within the grace) | released_by_owner ("release now")
    Column("outcome", String(32), nullable=True),
    Column("released_at_ms", BigInteger, nullable=True),
    Column("updated_at_ms", BigInteger, nullable=False),
)

# One row (id 1) of counters that triggers move in the transaction of a change: `directory`
# with users, groups, memberships, access rules and GPUs; `slots_freed` with every update or
# delete of a GPU slot. `booking.memory` checks them inside its write transaction.
versions = Table(
    "reservations_versions",
    metadata,
    Column("id", Integer, primary_key=True),
    Column("directory", BigInteger, nullable=False),
    Column("slots_freed", BigInteger, nullable=False),
)

# Attempts counted against a key within a window (failed logins per name and per address,
# calendar-feed fetches): the shared count behind the gateway's rate limits, so that every
# gateway replica sees every attempt (`services.accounts.attempts`). Rows are deleted when
# their window has passed.
attempts = Table(
    "reservations_attempts",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("key", String(320), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
    Column("until_ms", BigInteger, nullable=False, index=True),
    Index("ix_reservations_attempts_key_at", "key", "at_ms"),
)

# Maintenance windows (`rules/maintenance.py`): a host, or some of its GPUs (`gpu_indices`,
# comma-separated; null: every GPU of the host), drained from `start_ms` until `end_ms` (null:
# until an admin ends it). Nobody books a drained GPU inside its window. `bookings` is what the
# admin chose for the bookings it overlapped (keep | cancel | move). Migration
# `reservations_0015_maintenance`.
maintenance_windows = Table(
    "reservations_maintenance",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("host", String(253), nullable=False),
    Column("gpu_indices", String(400), nullable=True),
    Column("start_ms", BigInteger, nullable=False),
    Column("end_ms", BigInteger, nullable=True, index=True),
    Column("reason", String(500), nullable=False),
    Column("bookings", String(8), nullable=False, default="keep"),
    # True: jobs running on the drained GPUs are stopped when the window begins (jobs service).
    Column("stop_jobs", Boolean, nullable=False, default=False),
    Column("created_by", String(32), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("ended_by", String(32), nullable=True),
)

# Events written in the same transaction as the change they describe, published after the
# commit (and again after a crash): a change is never committed without its event.
outbox = outbox_table(metadata, "reservations")

# The key of each create (a client's Idempotency-Key, or the id of the RPC call that carried
# it): a create that comes again is answered with the reservation it made, not refused as a
# conflict with itself (booking/create_keys.py). Kept 24 hours. Migration `reservations_0012`.
create_keys = Table(
    "reservations_create_keys",
    metadata,
    Column("key", String(320), primary_key=True),
    Column(
        "reservation_id",
        Integer,
        ForeignKey("reservations.id", ondelete="CASCADE"),
        nullable=False,
    ),
    # What the request asked for (create_keys.fingerprint): the same key for another is refused.
    Column("fingerprint", String(64), nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    Index("ix_reservations_create_keys_created", "created_at_ms"),
)
