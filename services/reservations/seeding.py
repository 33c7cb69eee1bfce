"""What `warden demo` writes into the reservations database itself (the CLI calls these).

- `demo_accounts`: the demo's accounts, each with a new random password at every start, so
  the password the demo prints is always the one that works. The first admin cannot be made
  over RPC (creating a user takes an admin), which is why this goes to the database, as
  `warden user add` does.
- `book_as_of`: a reservation booked at a moment in the past. The RPC method refuses a start
  in the past, rightly; a demo's "last few days" are bookings that would have been made then.
  They go through the same `Changes.create` (every rule, the clash check, the
  `reservation.created` event in the outbox) with its clock set to that moment; the running
  service's relay publishes the event and its lifecycle sends started/ended as for any other.
"""

from __future__ import annotations

import secrets
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from datetime import datetime, timedelta
from typing import Any

from services.accounts import provisioning
from services.accounts.api import Actor
from services.accounts.provisioning import NewAccount
from services.reservations.booking.changes import Changes
from services.reservations.rules.refusals import DurationBounds
from services.reservations.store import Store
from services.shared.config import Settings
from services.shared.storage import db

DEMO_ACTOR = "demo"


@asynccontextmanager
async def _store(settings: Settings) -> AsyncIterator[Store]:
    engine = db.create_engine(settings.storage.database_url_for("reservations"))
    try:
        await db.ensure_migrated(engine, "reservations")
        yield Store(engine)
    finally:
        await engine.dispose()


def new_password() -> str:
    """16 URL-safe characters: easy to copy from a terminal, never guessed."""
    return secrets.token_urlsafe(12)


async def demo_accounts(settings: Settings, people: Sequence[tuple[str, bool]]) -> dict[str, str]:
    """Each (username, is_admin) exists afterwards with a new password: {username: password}."""
    passwords: dict[str, str] = {}
    async with _store(settings) as store:
        for username, is_admin in people:
            password = new_password()
            account = NewAccount(username, f"{username}@localhost", password, is_admin)
            async with store.write() as conn:
                await provisioning.create_or_reset(conn, account, actor=DEMO_ACTOR)
            passwords[username] = password
    return passwords


async def book_as_of(
    settings: Settings,
    booked_at: datetime,
    *,
    owner: str,
    gpu_uuids: Sequence[str],
    start: datetime,
    end: datetime,
    title: str,
    description: str = "",
) -> dict[str, Any]:
    """`owner` reserves `gpu_uuids` as they would have at `booked_at`; raises what the RPC
    method would (a clash, an unknown GPU, a start before `booked_at`)."""
    bounds = settings.reservations
    async with _store(settings) as store:
        changes = Changes(
            store,
            DurationBounds(
                shortest=timedelta(minutes=bounds.min_duration_min),
                longest=timedelta(hours=bounds.max_duration_h),
            ),
            clock=lambda: booked_at,
        )
        actor: Actor = await changes.actor(owner)
        return await changes.create(
            actor,
            owner=owner,
            gpu_uuids=gpu_uuids,
            start=start,
            end=end,
            title=title,
            description=description,
        )
