"""Creates done once: each create is written with its key, and a create that comes again with
a key already written is answered with the reservation it made, not refused as a conflict with
itself.

A create's key is the client's `Idempotency-Key` (`POST /reservations`), scoped to the user
who sent it, or else the id of the RPC call that carried it: RPC requests are acknowledged
after their answer, so a create whose replica died after its COMMIT and before its answer is
delivered again, to another replica, with the same call id (`services.shared.bus.RPC_DELIVERY`).
Only a client's key or a delivery marked as a repeat is looked up (one indexed read); every
keyed create writes its key, in the SAVEPOINT of its rows (`booking.writes`).

The same key with a different request (other GPUs, times, title, ...) is refused (422): it is
a client's mistake, never a second booking. Keys are kept `KEPT` (24 h), then forgotten.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.tables import create_keys
from services.shared.bus import RpcDelivery
from services.shared.errors import ValidationFailed

KEPT = timedelta(hours=24)
# How often the keys older than KEPT are deleted (by the writer, in a batch's transaction).
PRUNE_EVERY_S = 600.0


@dataclass(frozen=True)
class CreateKey:
    value: str  # what is stored: "key:<user>:<Idempotency-Key>" or "rpc:<call id>"
    look_up: bool  # it may have been written already: read it before checking the request

    @property
    def from_client(self) -> bool:
        return self.value.startswith("key:")


def key_for(
    actor: str, idempotency_key: str | None, delivery: RpcDelivery | None
) -> CreateKey | None:
    """The key of a create `actor` asked for (None: nothing to key it by)."""
    if idempotency_key:
        return CreateKey(f"key:{actor}:{idempotency_key}", look_up=True)
    if delivery is not None:
        return CreateKey(f"rpc:{delivery.request_id}", look_up=delivery.redelivered)
    return None


def fingerprint(
    owner: str,
    uuids: list[str],
    start_ms: int,
    end_ms: int,
    title: str,
    description: str,
    guests: tuple[str, ...],
) -> str:
    """What makes two creates the same request (the time it was asked at does not)."""
    text = "\x1f".join(
        [owner, ",".join(uuids), str(start_ms), str(end_ms), title, description, ",".join(guests)]
    )
    return hashlib.sha256(text.encode()).hexdigest()


def different_request(key: CreateKey) -> ValidationFailed:
    what = "Idempotency-Key" if key.from_client else "request id"
    return ValidationFailed(
        f"this {what} was used for a different reservation request; use a new key for a new "
        "request",
        {"field": "Idempotency-Key" if key.from_client else "request"},
    )


async def written(conn: AsyncConnection, key: CreateKey) -> tuple[int, str] | None:
    """(reservation id, fingerprint) of the create written with `key`, if any."""
    row = (
        await conn.execute(
            select(create_keys.c.reservation_id, create_keys.c.fingerprint).where(
                create_keys.c.key == key.value
            )
        )
    ).first()
    return None if row is None else (int(row.reservation_id), str(row.fingerprint))


class Pruner:
    """Deletes the keys older than KEPT, at most once every PRUNE_EVERY_S."""

    def __init__(self) -> None:
        self._next = 0.0

    async def maybe(self, conn: AsyncConnection, now_ms: int) -> None:
        moment = time.monotonic()
        if moment < self._next:
            return
        self._next = moment + PRUNE_EVERY_S
        cutoff = now_ms - int(KEPT.total_seconds() * 1000)
        await conn.execute(delete(create_keys).where(create_keys.c.created_at_ms < cutoff))
