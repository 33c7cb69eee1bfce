"""The body of every service's Alembic `env.py`: one version table per service.

Migrations always run on a connection handed over by `services.shared.storage.db.upgrade` (async
engines run Alembic's synchronous API through `run_sync`), so there is no offline mode.
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import context
from sqlalchemy import MetaData

from services.shared.storage.db import version_table


def run_migrations(target_metadata: MetaData | Sequence[MetaData]) -> None:
    config = context.config
    connection = config.attributes.get("connection")
    if connection is None:
        raise RuntimeError("run migrations with `warden db upgrade`")
    context.configure(
        connection=connection,
        target_metadata=target_metadata,
        version_table=version_table(config.attributes["service"]),
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()
