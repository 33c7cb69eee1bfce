"""GPU health as the reservations service learns it from the monitor's `gpu.health_changed`.

Each GPU's row keeps its health (conditional on `since`: a replayed or late event changes
nothing); a failed GPU then takes no new booking (`rules/gpu_health.py`, checked by the
creates) and is left out of find-slot (`queries.py`). When a GPU fails, the owner of every
current and upcoming booking on it is told, through the notification path, with the earliest
alternative slot; the bookings themselves stay (cancelling is the owner's choice). Admins are
alerted by the notification path itself (`notifications/producers.py`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import or_, select
from sqlalchemy.dialects import postgresql, sqlite

from services.notifications import api as notifications_api
from services.reservations.booking.queries import Queries
from services.reservations.rules.gpu_health import FAILED, failed_gpu_note
from services.reservations.store import Store, from_ms, to_ms
from services.reservations.tables import gpu_slots, gpus, reservations
from services.shared.bus import Bus
from services.shared.contracts import Envelope
from services.shared.errors import WardenError

log = logging.getLogger("warden.reservations")

NOTIFY_TIMEOUT_S = 10.0


def _upsert(dialect: str) -> Any:
    return postgresql.insert if dialect == "postgresql" else sqlite.insert


class GpuHealthWatch:
    def __init__(
        self,
        store: Store,
        queries: Queries | None = None,
        bus: Bus | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.store = store
        self.queries = queries
        self.bus = bus
        self.clock = clock

    async def changed(self, envelope: Envelope) -> None:
        """Record the GPU's health; when it newly failed, tell the owners of its bookings."""
        data = envelope.data
        since_ms = to_ms(datetime.fromisoformat(data["since"]))
        values = {
            "health": data["state"],
            "health_reason": data.get("reason"),
            "health_since_ms": since_ms,
        }
        async with self.store.read() as conn:  # most events change nothing: no write then
            before = (
                await conn.execute(
                    select(gpus.c.health, gpus.c.health_reason, gpus.c.health_since_ms).where(
                        gpus.c.uuid == data["uuid"]
                    )
                )
            ).first()
        if before is not None and (before.health_since_ms or 0) > since_ms:
            return  # an older event, replayed or late
        unchanged = before is not None and (before.health, before.health_reason) == (
            data["state"],
            data.get("reason"),
        )
        if not unchanged:  # (an ok GPU announced again writes nothing)
            async with self.store.write() as conn:
                # A GPU not known yet (its gpu.discovered comes on another queue): known now.
                insert = _upsert(conn.dialect.name)(gpus).values(
                    uuid=data["uuid"],
                    host=data["host"],
                    gpu_index=data.get("index") or 0,
                    name="",
                    present=True,
                    first_seen_ms=since_ms,
                    last_change_ms=0,  # its gpu.discovered still sets its identity
                    **values,
                )
                await conn.execute(
                    insert.on_conflict_do_update(
                        index_elements=[gpus.c.uuid],
                        set_=values,
                        where=or_(
                            gpus.c.health_since_ms.is_(None), gpus.c.health_since_ms <= since_ms
                        ),
                    )
                )
        # Newly failed, or this very event again (its owners' notices may not all have gone
        # out: the notification keys keep each to one message).
        if data["state"] == FAILED and (
            before is None or before.health != FAILED or before.health_since_ms == since_ms
        ):
            log.warning(
                "GPU %s:%s failed (%s): it takes no new booking",
                data["host"],
                data.get("index"),
                data.get("reason"),
            )
            await self._tell_owners(data)

    async def _tell_owners(self, gpu: dict[str, Any]) -> None:
        if self.bus is None:
            return
        now = self.clock()
        for booking in await self._bookings_on(gpu["uuid"], now):
            note = failed_gpu_note(
                owner=booking["owner"],
                reservation_id=booking["id"],
                title=booking["title"],
                start=booking["start"],
                end=booking["end"],
                gpu=gpu,
                slot=await self._alternative(booking, now),
                now=now,
            )
            try:
                await notifications_api.NOTIFY.call(self.bus, note, timeout=NOTIFY_TIMEOUT_S)
            except WardenError as err:
                # The event is not acked: it comes again, and the key keeps it to one message.
                log.warning(
                    "could not tell %s about GPU %s: %s", booking["owner"], gpu["uuid"], err
                )
                raise

    async def _bookings_on(self, uuid: str, now: datetime) -> list[dict[str, Any]]:
        """Current and upcoming active bookings on GPU `uuid`, with all their GPUs."""
        async with self.store.read() as conn:
            rows = (
                await conn.execute(
                    select(
                        reservations.c.id,
                        reservations.c.owner,
                        reservations.c.title,
                        reservations.c.start_ms,
                        reservations.c.end_ms,
                    )
                    .join(gpu_slots, gpu_slots.c.reservation_id == reservations.c.id)
                    .where(
                        gpu_slots.c.gpu_uuid == uuid,
                        gpu_slots.c.active,
                        gpu_slots.c.end_ms > to_ms(now),
                    )
                    .order_by(reservations.c.start_ms)
                )
            ).all()
            found = []
            for row in rows:
                uuids = (
                    await conn.execute(
                        select(gpu_slots.c.gpu_uuid).where(gpu_slots.c.reservation_id == row.id)
                    )
                ).scalars()
                found.append(
                    {
                        "id": row.id,
                        "owner": row.owner,
                        "title": row.title,
                        "start": from_ms(row.start_ms),
                        "end": from_ms(row.end_ms),
                        "gpus": sorted(uuids),
                    }
                )
        return found

    async def _alternative(self, booking: dict[str, Any], now: datetime) -> dict[str, Any] | None:
        """The earliest slot the owner may book for the rest of the booking (as many GPUs, as
        long), on GPUs that have not failed; None when there is none."""
        if self.queries is None:
            return None
        start = max(booking["start"], now)
        duration = max(booking["end"] - start, timedelta(minutes=1))
        try:
            return await self.queries.find_slot(
                booking["owner"],
                count=len(booking["gpus"]),
                duration=duration,
                not_before=start,
                same_host=len(booking["gpus"]) > 1,
                now=now,
            )
        except WardenError:
            return None
