"""The GPUs the reservations service knows, learnt from the monitor's events.

Both writes are conditional on the event's time, so a replayed or late event changes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import update
from sqlalchemy.dialects import postgresql, sqlite

from services.reservations.store import Store, to_ms
from services.reservations.tables import gpus
from services.shared.contracts import Envelope


def _upsert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


class GpuInventory:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def discovered(self, envelope: Envelope) -> None:
        """Learn a GPU, or its new identity."""
        data = envelope.data
        at_ms = to_ms(datetime.fromisoformat(envelope.occurred_at))
        values = {
            "host": data["host"],
            "gpu_index": data["index"],
            "name": data["name"],
            "memory_total_mib": data["memory_total_mib"],
            "present": True,
            "mig_parent_uuid": data.get("mig_parent_uuid"),
            "last_change_ms": at_ms,
        }
        async with self.store.write() as conn:
            insert = _upsert(conn.dialect.name)(gpus).values(
                uuid=data["uuid"], first_seen_ms=at_ms, **values
            )
            await conn.execute(
                insert.on_conflict_do_update(
                    index_elements=[gpus.c.uuid],
                    set_=values,
                    where=gpus.c.last_change_ms <= at_ms,
                )
            )

    async def disappeared(self, envelope: Envelope) -> None:
        """A GPU missing from its host stays known (its reservations stay visible)."""
        at_ms = to_ms(datetime.fromisoformat(envelope.data["at"]))
        async with self.store.write() as conn:
            await conn.execute(
                update(gpus)
                .where(gpus.c.uuid == envelope.data["uuid"], gpus.c.last_change_ms <= at_ms)
                .values(present=False, last_change_ms=at_ms)
            )
