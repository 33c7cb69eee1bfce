from services.jobs.tables import metadata
from services.shared.storage.migrations_env import run_migrations

run_migrations(metadata)
