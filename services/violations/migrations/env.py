from services.shared.migrations_env import run_migrations
from services.violations.tables import metadata

run_migrations(metadata)
