"""The RPC methods of maintenance windows: an admin drains a host or some of its GPUs (now or
later, until a moment or until further notice) with a reason, lists and ends windows.

A new window is written first, so from its commit no booking in it is made (`booking.creates`
refuses them, the slot search treats the window as busy). Then the bookings it overlaps are
found, each with the earliest alternative its owner may book (same number of GPUs, as long, on
GPUs not drained), and dealt with as the admin chose: kept (the default), cancelled (ended now
when it runs) or moved to the alternative (booked for the owner, then the old one cancelled, so
it is never lost). Last, `maintenance.scheduled` lists them with their outcome: the
notification path tells each owner at once (`notifications/producers.py`).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from services.accounts.api import Actor
from services.reservations.booking import repository
from services.reservations.booking.changes import Changes
from services.reservations.booking.queries import Queries
from services.reservations.booking.repository import ReservationRecord
from services.reservations.maintenance import rows
from services.reservations.outbox import add_event
from services.reservations.rules.domain import Gpu
from services.reservations.rules.maintenance import (
    OPEN_ENDED_HORIZON,
    Window,
    covered_gpus,
    target_refusals,
    window_refusals,
)
from services.reservations.rules.refusals import refusal_error
from services.reservations.store import Store, from_ms, to_ms
from services.shared.errors import NotFound, WardenError

log = logging.getLogger(__name__)


class MaintenanceCalls:
    def __init__(self, store: Store, changes: Changes, queries: Queries) -> None:
        self.store = store
        self.changes = changes
        self.queries = queries

    async def _admin(self, username: str) -> Actor:
        actor = await self.changes.actor(username)
        self.changes.require_admin(actor)
        return actor

    async def create(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._admin(args["actor"])
        now = self.changes.clock()
        start = max(args["start"] or now, now)  # a window never starts in the past
        end, reason, choice = args["end"], args["reason"].strip(), args["bookings"]
        indices = None if args["gpus"] is None else frozenset(args["gpus"])
        async with self.store.read() as conn:
            known = await repository.load_gpus(conn)
        refusals = window_refusals(start, end, reason, choice, now)
        refusals += target_refusals(args["host"], indices, known.values())
        if refusals:
            raise refusal_error(refusals)
        async with self.store.write() as conn:
            window_id = await rows.add(
                conn,
                host=args["host"],
                indices=indices,
                start_ms=to_ms(start),
                end_ms=None if end is None else to_ms(end),
                reason=reason,
                bookings=choice,
                stop_jobs=args["stop_jobs"],
                created_by=actor.username,
                now_ms=to_ms(now),
            )
            found = await rows.row(conn, window_id)
            assert found is not None
            window = rows.window(found)
            held = await self._overlapped(conn, window, known, now)
        affected = [
            await self._deal_with(actor, window, choice, record, known, now) for record in held
        ]
        answer = {**rows.to_dict(found, to_ms(now)), "affected": affected}
        async with self.store.write() as conn:
            await add_event(conn, "maintenance.scheduled", answer)
        return answer

    @staticmethod
    async def _overlapped(
        conn: Any, window: Window, known: dict[str, Gpu], now: datetime
    ) -> list[ReservationRecord]:
        """The active bookings holding a drained GPU during the window (and not over)."""
        far = now + OPEN_ENDED_HORIZON
        uuids = [gpu.uuid for gpu in covered_gpus(window, known.values())]
        clashes = await repository.clashes(
            conn, uuids, to_ms(max(window.start, now)), to_ms(window.until(far))
        )
        records = await repository.records(conn, sorted({c.reservation_id for c in clashes}))
        return sorted(records.values(), key=lambda r: (r.start_ms, r.id))

    async def _alternative(
        self, record: ReservationRecord, known: dict[str, Gpu], now: datetime
    ) -> dict[str, Any] | None:
        """The earliest slot its owner may book instead: as many GPUs, for as long as is
        left of it, on one host when it was on one host (the window is busy by now)."""
        start = max(from_ms(record.start_ms), now)
        duration = from_ms(record.end_ms) - start
        hosts = {known[uuid].host if uuid in known else uuid for uuid in record.gpu_uuids}
        try:
            found = await self.queries.find_slot(
                record.owner,
                count=len(record.gpu_uuids),
                duration=max(duration, timedelta(minutes=1)),
                not_before=start,
                same_host=len(hosts) == 1 and len(record.gpu_uuids) > 1,
                now=now,
            )
        except WardenError:  # no slot within the search's horizon
            return None
        gpus = [{key: gpu[key] for key in ("uuid", "host", "index")} for gpu in found["gpus"]]
        return {**found, "gpus": gpus}

    async def _deal_with(
        self,
        actor: Actor,
        window: Window,
        choice: str,
        record: ReservationRecord,
        known: dict[str, Gpu],
        now: datetime,
    ) -> dict[str, Any]:
        alternative = await self._alternative(record, known, now)
        outcome, moved_to = "kept", None
        why = f"maintenance of {window.target}: {window.reason}"
        try:
            if choice == "move" and alternative is None:
                outcome = "not_moved"
            elif choice == "move" and alternative is not None:
                moved = await self.changes.create(
                    actor,
                    owner=record.owner,
                    gpu_uuids=[gpu["uuid"] for gpu in alternative["gpus"]],
                    start=datetime.fromisoformat(alternative["start"]),
                    end=datetime.fromisoformat(alternative["end"]),
                    title=record.title,
                    description=record.description,
                    guests=record.guests,
                )
                moved_to = moved["id"]
                await self._stop(
                    actor, window, record, now, f"moved to #{moved_to} for {why}", whole=True
                )
                outcome = "moved"
            elif choice == "cancel":
                outcome = await self._stop(actor, window, record, now, why)
        except WardenError as err:  # kept as it was; the owner is told so
            log.warning(
                "maintenance %d: %s of reservation %d failed: %s",
                window.id,
                choice,
                record.id,
                err.message,
            )
            outcome = "not_moved" if choice == "move" else "kept"
        return {
            "reservation_id": record.id,
            "owner": record.owner,
            "title": record.title,
            "start": from_ms(record.start_ms).isoformat(),
            "end": from_ms(record.end_ms).isoformat(),
            "outcome": outcome,
            "alternative": alternative,
            "moved_to": moved_to,
        }

    async def _stop(
        self,
        actor: Actor,
        window: Window,
        record: ReservationRecord,
        now: datetime,
        why: str,
        *,
        whole: bool = False,
    ) -> str:
        """Free the drained GPUs for the window: a booking that starts before the window ends
        at its start (or now, when that is too short); one within it is cancelled, or ended now
        when it runs already. `whole`: never shortened (it was moved)."""
        start = from_ms(record.start_ms)
        if not whole and start < window.start and window.start > now:
            try:
                await self.changes.update(actor, record.id, end=window.start)
                return "shortened"
            except WardenError:  # too short a booking: it goes whole
                pass
        if start <= now:
            await self.changes.end_now(actor, record.id)
            return "ended"
        await self.changes.cancel(actor, record.id, why[:500])
        return "cancelled"

    async def list(self, args: dict[str, Any]) -> list[dict[str, Any]]:
        now_ms = to_ms(self.changes.clock())
        start = now_ms if args["start"] is None else to_ms(args["start"])
        end = None if args["end"] is None else to_ms(args["end"])
        async with self.store.read() as conn:
            found = await rows.rows(conn, start, end)
        return [rows.to_dict(row, now_ms) for row in found]

    async def end(self, args: dict[str, Any]) -> dict[str, Any]:
        actor = await self._admin(args["actor"])
        now_ms = to_ms(self.changes.clock())
        async with self.store.write() as conn:
            found = await rows.row(conn, args["id"])
            if found is None:
                raise NotFound(f"no maintenance window {args['id']}", {"id": args["id"]})
            if found.end_ms is not None and found.end_ms <= now_ms:
                return rows.to_dict(found, now_ms)  # over already: nothing changes
            if found.start_ms > now_ms:
                await rows.remove(conn, args["id"])
                answer = rows.to_dict(found, now_ms, status="removed")
            else:
                await rows.end(conn, args["id"], now_ms, actor.username)
                ended = await rows.row(conn, args["id"])
                assert ended is not None
                answer = rows.to_dict(ended, now_ms, status="ended")
            answer["ended_by"] = actor.username
            await add_event(conn, "maintenance.ended", answer)
        return answer
