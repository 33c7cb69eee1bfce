from services.notifications.tables import metadata as notifications_metadata
from services.shared.storage.migrations_env import run_migrations
from services.violations.tables import metadata

# The notification path's tables are in this database too (services/notifications/tables.py).
run_migrations([metadata, notifications_metadata])
