"""The reservations service's outbox: events written with their change, published after it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.tables import outbox
from services.shared.storage import outbox as shared_outbox

SOURCE = "reservations"


async def add_event(conn: AsyncConnection, type_name: str, data: Mapping[str, Any]) -> None:
    await shared_outbox.add_event(conn, outbox, SOURCE, type_name, data)
