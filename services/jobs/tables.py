"""Tables owned by the jobs service (only it reads or writes them). Times: integer ms (UTC).

A job's definition (tasks, parameters, environment, template) is one JSON document: it is
read and written whole. What changes while it runs (each task's status, pid, exit code) has
its own row per task, and every run of a task ends as a row in `jobs_runs` (the history).
"""

from sqlalchemy import (
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

from services.shared.cluster.leadership import lease_table
from services.shared.storage.db import applied_events_table
from services.shared.storage.outbox import outbox_table

metadata = MetaData()

applied_events = applied_events_table(metadata, "jobs")

jobs = Table(
    "jobs_jobs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("owner", String(255), nullable=False),
    Column("name", String(255), nullable=False),
    Column("description", Text, nullable=False, default=""),
    Column("spec", Text, nullable=False),  # JSON: params, env, template, tasks
    Column("status", String(16), nullable=False),
    Column("queued", Boolean, nullable=False, default=False),
    Column("enqueued_at_ms", BigInteger, nullable=True),
    Column("start_at_ms", BigInteger, nullable=True),
    Column("stop_at_ms", BigInteger, nullable=True),
    Column("reservation_id", Integer, nullable=True),
    Column("max_runtime_s", Float, nullable=True),
    Column("from_queue", Boolean, nullable=False, default=False),  # the running one was queued
    Column("stop_requested_at_ms", BigInteger, nullable=True),
    Column("stop_reason", String(255), nullable=True),
    # The signals of the current stop already sent (INT, TERM, KILL): a new leader sends none
    # of them again.
    Column("signals_sent", String(32), nullable=False, server_default=""),
    Column("interrupted_for", Text, nullable=False, default="[]"),  # JSON reservation ids
    Column("waiting_reason", Text, nullable=True),
    # Hand-back and failures (jobs_0005): times it yielded to a reservation, whether its owner
    # was told it ran past its time limit, how its last run failed and why.
    Column("interruptions", Integer, nullable=False, server_default="0"),
    Column("time_limit_told", Boolean, nullable=False, server_default=false()),
    Column("failure", String(16), nullable=True),
    Column("failure_reason", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("updated_at_ms", BigInteger, nullable=False),
    Index("jobs_jobs_owner", "owner", "id"),
    Index("jobs_jobs_status", "status"),
    sqlite_autoincrement=True,  # a deleted job's id is never given to another
)

tasks = Table(
    "jobs_tasks",
    metadata,
    Column("job_id", Integer, ForeignKey("jobs_jobs.id", ondelete="CASCADE"), primary_key=True),
    Column("task_index", Integer, primary_key=True),
    Column("status", String(16), nullable=False),
    Column("run", Integer, nullable=False, default=0),
    Column("host", String(255), nullable=True),  # where it runs (chosen for queued tasks)
    Column("gpus", Text, nullable=False, default="[]"),  # JSON uuids it runs on
    Column("port", Integer, nullable=True),
    Column("pid", Integer, nullable=True),
    Column("started_at_ms", BigInteger, nullable=True),  # by the host's clock
    Column("ended_at_ms", BigInteger, nullable=True),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=True),
    Column("last_seen_at_ms", BigInteger, nullable=True),
)

runs = Table(
    "jobs_runs",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("job_id", Integer, ForeignKey("jobs_jobs.id", ondelete="CASCADE"), nullable=False),
    Column("task_index", Integer, nullable=False),
    Column("run", Integer, nullable=False),
    Column("host", String(255), nullable=True),
    Column("gpus", Text, nullable=False),
    Column("status", String(16), nullable=False),
    Column("exit_code", Integer, nullable=True),
    Column("reason", Text, nullable=True),
    Column("started_at_ms", BigInteger, nullable=True),
    Column("ended_at_ms", BigInteger, nullable=True),
    Index("jobs_runs_task", "job_id", "task_index", "run"),
)

outbox = outbox_table(metadata, "jobs")

# Which replica leads (services/shared/cluster/leadership.py).
leader_lease = lease_table(metadata, "jobs")
