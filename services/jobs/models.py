"""Tables owned by the jobs service (only it reads or writes them)."""

from sqlalchemy import MetaData

from services.shared.db import applied_events_table

metadata = MetaData()

applied_events = applied_events_table(metadata, "jobs")
