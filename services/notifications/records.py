"""The notification tables: preferences, keys already sent, and the record of deliveries."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from services.notifications.preferences import Preferences
from services.notifications.tables import notification_keys, notification_prefs, notifications_sent
from services.shared.storage.store import iso_ms


async def load_prefs(
    conn: AsyncConnection, username: str
) -> tuple[Preferences, str | None, str | None]:
    """(preferences, chat format, chat URL) of `username`; the defaults when never set."""
    row = (
        await conn.execute(
            sa.select(notification_prefs).where(notification_prefs.c.username == username)
        )
    ).first()
    if row is None:
        return Preferences(), None, None
    return Preferences.from_json(row.prefs), row.chat_format, row.chat_url


async def load_all_prefs(conn: AsyncConnection, usernames: Iterable[str]) -> dict[str, Preferences]:
    """The preferences of each of `usernames` (the defaults for those who never set any), in
    one query."""
    wanted = sorted(set(usernames))
    found = {name: Preferences() for name in wanted}
    if wanted:
        query = sa.select(notification_prefs.c.username, notification_prefs.c.prefs).where(
            notification_prefs.c.username.in_(wanted)
        )
        for username, stored in await conn.execute(query):
            found[username] = Preferences.from_json(stored)
    return found


async def save_prefs(
    conn: AsyncConnection,
    username: str,
    prefs: Preferences,
    chat_format: str | None,
    chat_url: str | None,
    at_ms: int,
) -> None:
    values = {
        "prefs": prefs.to_json(),
        "chat_format": chat_format,
        "chat_url": chat_url,
        "updated_at_ms": at_ms,
    }
    changed = await conn.execute(
        sa.update(notification_prefs)
        .where(notification_prefs.c.username == username)
        .values(**values)
    )
    if changed.rowcount == 0:
        await conn.execute(sa.insert(notification_prefs).values(username=username, **values))


async def claim_key(conn: AsyncConnection, username: str, key: str, at_ms: int) -> None:
    """Mark `key` sent for `username`; IntegrityError (on commit at the latest) when it was
    claimed before: the caller's transaction holds nothing else."""
    await conn.execute(sa.insert(notification_keys).values(username=username, key=key, at_ms=at_ms))


async def record(
    conn: AsyncConnection,
    *,
    username: str,
    kind: str,
    channel: str,
    title: str,
    outcome: str,
    detail: str,
    at_ms: int,
) -> int:
    result = await conn.execute(
        sa.insert(notifications_sent).values(
            username=username,
            kind=kind,
            channel=channel,
            title=title[:200],
            outcome=outcome,
            detail=detail[:1000],
            at_ms=at_ms,
        )
    )
    key = result.inserted_primary_key
    return int(key[0]) if key is not None else 0


async def list_sent(
    conn: AsyncConnection, username: str, limit: int, offset: int
) -> dict[str, Any]:
    """The user's record, newest first, with the total."""
    table = notifications_sent
    total = (
        await conn.execute(
            sa.select(sa.func.count()).select_from(table).where(table.c.username == username)
        )
    ).scalar_one()
    rows = (
        await conn.execute(
            sa.select(table)
            .where(table.c.username == username)
            .order_by(table.c.id.desc())
            .limit(limit)
            .offset(offset)
        )
    ).all()
    items = [
        {
            "id": row.id,
            "kind": row.kind,
            "channel": row.channel,
            "title": row.title,
            "outcome": row.outcome,
            "detail": row.detail,
            "at": iso_ms(row.at_ms),
        }
        for row in rows
    ]
    return {"items": items, "total": int(total)}
