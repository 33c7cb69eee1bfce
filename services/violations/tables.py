"""Tables owned by the violations service (only it reads or writes them). Times: integer ms.

The notification path's tables live in the same database, declared in
`services.notifications.tables` (the migrations here create them).
"""

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    Text,
)

from services.shared.cluster.leadership import lease_table
from services.shared.storage.db import applied_events_table
from services.shared.storage.outbox import outbox_table

metadata = MetaData()

applied_events = applied_events_table(metadata, "violations")

incidents = Table(
    "violations_incidents",
    metadata,
    Column("id", String(36), primary_key=True),
    Column("host", String(255), nullable=False),
    Column("gpu_uuid", String(128), nullable=False),
    Column("gpu_index", Integer, nullable=True),
    Column("offender", String(255), nullable=False),
    Column("mode", String(16), nullable=False),
    Column("reservation_id", Integer, nullable=True),
    Column("owner", String(255), nullable=True),
    Column("reservation_start_ms", BigInteger, nullable=True),
    Column("reservation_end_ms", BigInteger, nullable=True),
    Column("opened_at_ms", BigInteger, nullable=False),
    Column("since_ms", BigInteger, nullable=False),
    Column("last_seen_at_ms", BigInteger, nullable=False),
    Column("resolved_at_ms", BigInteger, nullable=True),
    Column("resolve_reason", String(255), nullable=True),
    Column("processes", Text, nullable=False),  # JSON list of {pid, command, started_at, ...}
    Column("steps", Text, nullable=False),  # JSON list of the step texts it escalates by
    Index("violations_incidents_open", "resolved_at_ms"),
    Index("violations_incidents_opened", "opened_at_ms"),
)

# The timeline of an incident: opened, processes changed, steps escalated, what each handler
# did to each target, resolved.
actions = Table(
    "violations_actions",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column(
        "incident_id",
        String(36),
        ForeignKey("violations_incidents.id", ondelete="CASCADE"),
        nullable=False,
    ),
    Column("at_ms", BigInteger, nullable=False),
    Column("kind", String(16), nullable=False),  # opened | updated | escalated | action | resolved
    Column("step_index", Integer, nullable=True),
    Column("handler", String(64), nullable=True),
    Column("target", String(512), nullable=True),
    Column("ok", Boolean, nullable=True),
    Column("detail", Text, nullable=False, default=""),
    Index("violations_actions_incident", "incident_id", "id"),
)

outbox = outbox_table(metadata, "violations")

# Which replica leads (services/shared/cluster/leadership.py).
leader_lease = lease_table(metadata, "violations")

# A built-in handler's step, claimed before it acts: a step is taken by one replica at most
# once, whatever the redeliveries and takeovers (see responders.py).
step_claims = Table(
    "violations_step_claims",
    metadata,
    Column(
        "incident_id",
        String(36),
        ForeignKey("violations_incidents.id", ondelete="CASCADE"),
        primary_key=True,
    ),
    Column("step_index", Integer, primary_key=True),
    Column("handler", String(64), primary_key=True),
    Column("holder", String(255), nullable=False),
    Column("at_ms", BigInteger, nullable=False),
)
