"""The delivery settings' rows: what the Settings page saved, per channel (JSON)."""

from __future__ import annotations

import json
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.notifications.delivery.setup import Saved
from services.notifications.tables import delivery_settings

CHANNELS = ("smtp", "webhooks")


async def load_saved(conn: AsyncConnection) -> Saved:
    rows = await conn.execute(sa.select(delivery_settings.c.channel, delivery_settings.c.value))
    found = {channel: json.loads(value) for channel, value in rows}
    return Saved(smtp=found.get("smtp"), webhooks=found.get("webhooks"))


async def save(conn: AsyncConnection, channel: str, value: Any, by: str, at_ms: int) -> None:
    """Save one channel's settings; None forgets them (the file's hold again)."""
    assert channel in CHANNELS
    await conn.execute(sa.delete(delivery_settings).where(delivery_settings.c.channel == channel))
    if value is not None:
        await conn.execute(
            sa.insert(delivery_settings).values(
                channel=channel, value=json.dumps(value), updated_by=by, updated_at_ms=at_ms
            )
        )
