"""Changes to reservations and access rules: check, write and record the event in one
transaction, so a change is never half made nor made without its event.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts import users as accounts
from services.accounts.api import Actor
from services.reservations.booking import repository, writes
from services.reservations.booking.create_keys import CreateKey
from services.reservations.booking.creates import Creates, Request
from services.reservations.booking.repository import ReservationRecord
from services.reservations.maintenance import rows as maintenance
from services.reservations.outbox import add_event
from services.reservations.rules.access import access_refusals, rule_applies_to, rule_problems
from services.reservations.rules.domain import AccessRule, Booking, Gpu, Member, Refusal
from services.reservations.rules.maintenance import gained_refusals
from services.reservations.rules.refusals import (
    DurationBounds,
    cancel_refusals,
    conflict_refusals,
    edit_refusals,
    end_now_refusals,
    guest_refusals,
    interval_refusals,
    refusal_error,
    text_refusals,
)
from services.reservations.store import Store, lock_owner, to_ms
from services.reservations.tables import access_rules, reservations
from services.shared.errors import (
    InvalidRequest,
    NotFound,
    ReservationConflict,
    WardenError,
)

# Quota weeks start on a Monday in the rule's zone: look this far around a request for the
# owner's other reservations that count against the same weeks.
QUOTA_MARGIN = timedelta(days=8)

Also = Callable[[AsyncConnection], Awaitable[None]]


@dataclass
class Changed:
    """What an access re-check did."""

    cancelled: list[int]
    restored: list[int]


class Changes:
    def __init__(
        self,
        store: Store,
        bounds: DurationBounds,
        *,
        on_commit: Callable[[], None] = lambda: None,
        on_created: Callable[[int], None] | None = None,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        host_offered: Callable[[str], bool] = lambda _host: True,
    ) -> None:
        self.store = store
        self.bounds = bounds
        # Whether a host is in the monitor's inventory: a removed host's GPUs take no new booking.
        self.host_offered = host_offered
        self.on_commit = on_commit  # wakes the outbox relay and the lifecycle timer
        # After creates committed, with their earliest start (ms); None: `on_commit`. Wakes
        # only what a booking starting then concerns (service.py).
        self.on_created = on_created
        self.clock = clock
        # Creates: checked in memory, written by group commit (`booking.creates`).
        self.creates = Creates(
            store,
            bounds,
            on_commit=self._created,
            host_offered=lambda host: self.host_offered(host),
            quota_margin=QUOTA_MARGIN,
        )

    def _created(self, earliest_start_ms: int) -> None:
        if self.on_created is None:
            self.on_commit()
        else:
            self.on_created(earliest_start_ms)

    # --- who is asking ------------------------------------------------------------------------

    async def actor(self, username: str) -> Actor:
        async with self.store.read() as conn:
            return await accounts.actor(conn, username)

    @staticmethod
    async def _gpus(conn: AsyncConnection, uuids: Sequence[str]) -> dict[str, Gpu]:
        found = await repository.load_gpus(conn, uuids)
        missing = sorted(set(uuids) - set(found))
        if missing:
            raise InvalidRequest(
                f"unknown GPU {', '.join(missing)}", {"field": "gpus", "unknown": missing}
            )
        return found

    @staticmethod
    async def _check_guests(conn: AsyncConnection, guests: Sequence[str]) -> None:
        unknown = await accounts.unknown_usernames(conn, guests)
        if unknown:
            raise InvalidRequest(
                f"unknown user {', '.join(unknown)} in guests",
                {"field": "guests", "unknown": unknown},
            )

    async def _access_refusals(
        self,
        conn: AsyncConnection,
        member: Member,
        gpus: dict[str, Gpu],
        start: datetime,
        end: datetime,
        exclude_id: int | None = None,
    ) -> list[Refusal]:
        rules = await repository.load_rules(conn)
        applicable = [rule for rule in rules if rule_applies_to(rule, member)]
        bookings: list[Booking] = []
        if any(rule.limits.any for rule in applicable):
            bookings = await repository.owner_bookings(
                conn,
                member.username,
                to_ms(start - QUOTA_MARGIN),
                to_ms(end + QUOTA_MARGIN),
                exclude_id,
            )
        held = {uuid for booking in bookings for uuid in booking.gpus} - set(gpus)
        known = await repository.load_gpus(conn, held) if held else {}
        return access_refusals(member, applicable, list(gpus.values()), start, end, bookings, known)

    async def _finish(
        self, conn: AsyncConnection, reservation_id: int, event: str, **extra: Any
    ) -> dict[str, Any]:
        found = await repository.record(conn, reservation_id)
        assert found is not None
        known = await repository.load_gpus(conn, found.gpu_uuids)
        await add_event(conn, event, {**found.event_data(known), **extra})
        return found.to_dict(known)

    async def _explain_race(
        self, gpu_uuids: Sequence[str], start_ms: int, end_ms: int, exclude_id: int | None
    ) -> WardenError:
        """The database refused an overlap another request committed meanwhile: say which."""
        async with self.store.read() as conn:
            found = await repository.clashes(conn, gpu_uuids, start_ms, end_ms, exclude_id)
            known = await repository.load_gpus(conn, gpu_uuids)
        return (
            refusal_error(conflict_refusals(found, known))
            if found
            else ReservationConflict(
                "a GPU was reserved by someone else at the same moment; try again", {"reasons": []}
            )
        )

    # --- reservations -------------------------------------------------------------------------

    async def create(
        self,
        actor: Actor | str,
        *,
        owner: str,
        gpu_uuids: Sequence[str],
        start: datetime,
        end: datetime,
        title: str,
        description: str = "",
        guests: Sequence[str] = (),
        key: CreateKey | None = None,
    ) -> dict[str, Any]:
        """A new reservation; `guests` may use its GPUs too (only the owner's access counts).
        `actor` may be a bare username: it is then looked up in the write transaction. Asked
        again with the same `key`: answered with the reservation it made."""
        return await self.creates.create(
            Request(
                actor=actor,
                owner=owner,
                uuids=sorted(set(gpu_uuids)),
                start=start,
                end=end,
                title=title,
                description=description,
                guests=tuple(sorted(set(guests))),
                now=self.clock(),
                key=key,
            )
        )

    async def _current(self, conn: AsyncConnection, reservation_id: int) -> ReservationRecord:
        found = await repository.record(conn, reservation_id)
        if found is None:
            raise NotFound(f"no reservation {reservation_id}", {"id": reservation_id})
        return found

    async def update(  # noqa: C901 - every editable field checked, then one write
        self,
        actor: Actor,
        reservation_id: int,
        *,
        title: str | None = None,
        description: str | None = None,
        start: datetime | None = None,
        end: datetime | None = None,
        guests: Sequence[str] | None = None,
    ) -> dict[str, Any]:
        """Change what is given (None: unchanged); `guests` replaces the list, any time while
        the reservation is active (only times keep the past as it was).
        """
        now = self.clock()
        guest_names = None if guests is None else tuple(sorted(set(guests)))
        refusals = text_refusals(title, description)
        if refusals:
            raise refusal_error(refusals)
        attempted: tuple[list[str], int, int] = ([], 0, 0)
        try:
            async with self.store.write() as conn:
                current = await self._current(conn, reservation_id)
                await lock_owner(conn, current.owner)
                refusals = edit_refusals(actor, current.current, now, start=start, end=end)
                refusals += guest_refusals(current.owner, guest_names)
                if all(v is None for v in (title, description, start, end, guest_names)):
                    refusals.append(Refusal("invalid", "nothing to change"))
                if refusals:
                    raise refusal_error(refusals)
                new_guests = guest_names if guest_names != current.guests else None
                if new_guests is not None:
                    await self._check_guests(conn, new_guests)
                values: dict[str, Any] = {}
                if title is not None and title.strip() != current.title:
                    values["title"] = title.strip()
                if description is not None and description != current.description:
                    values["description"] = description
                new_start = start or current.current.start
                new_end = end or current.current.end
                if new_start != current.current.start or new_end != current.current.end:
                    attempted = (list(current.gpu_uuids), to_ms(new_start), to_ms(new_end))
                    await self._check_new_times(conn, current, new_start, new_end, now)
                    if new_start != current.current.start:
                        values["start_ms"] = to_ms(new_start)
                    if new_end != current.current.end:
                        values["end_ms"] = to_ms(new_end)
                if not values and new_guests is None:
                    known = await repository.load_gpus(conn, current.gpu_uuids)
                    return current.to_dict(known)
                changed = [k.removesuffix("_ms") for k in values]
                if new_guests is not None:
                    await writes.set_guests(conn, reservation_id, new_guests)
                    changed.append("guests")
                changed.sort()
                await writes.update_reservation(
                    conn, reservation_id, **values, updated_at_ms=to_ms(now)
                )
                updated = await self._finish(
                    conn,
                    reservation_id,
                    "reservation.updated",
                    changed=changed,
                    actor=actor.username,
                )
        except IntegrityError as err:
            raise await self._explain_race(*attempted, reservation_id) from err
        self.on_commit()
        return updated

    async def _check_new_times(
        self,
        conn: AsyncConnection,
        current: ReservationRecord,
        start: datetime,
        end: datetime,
        now: datetime,
    ) -> None:
        refusals = interval_refusals(
            start, end, self.bounds, now, new_start=start != current.current.start
        )
        if refusals:
            raise refusal_error(refusals)
        gpus = await repository.load_gpus(conn, current.gpu_uuids)
        found = await repository.clashes(
            conn, current.gpu_uuids, to_ms(start), to_ms(end), current.id
        )
        refusals = conflict_refusals(found, gpus)
        # Only the time it gains: a booking kept in a drain window may still shrink.
        windows = await maintenance.windows(conn, to_ms(start), to_ms(end))
        refusals += gained_refusals(windows, gpus.values(), current.current, start, end)
        member = await repository.member(conn, current.owner)
        refusals += await self._access_refusals(conn, member, gpus, start, end, current.id)
        if refusals:
            raise refusal_error(refusals)

    async def cancel(self, actor: Actor, reservation_id: int, reason: str = "") -> dict[str, Any]:
        now = self.clock()
        async with self.store.write() as conn:
            current = await self._current(conn, reservation_id)
            refusals = cancel_refusals(actor, current.current, now)
            if refusals:
                raise refusal_error(refusals)
            await writes.update_reservation(
                conn,
                reservation_id,
                status="cancelled",
                cancelled_at_ms=to_ms(now),
                cancelled_by=actor.username,
                cancel_reason=reason.strip() or None,
                cancelled_by_rules=False,
                updated_at_ms=to_ms(now),
            )
            cancelled = await self._finish(
                conn, reservation_id, "reservation.cancelled", by_rules=False
            )
        self.on_commit()
        return cancelled

    async def end_now(
        self, actor: Actor, reservation_id: int, also: Also | None = None
    ) -> dict[str, Any]:
        """End a running reservation now; reservation.ended follows from the lifecycle.
        `also` runs in the same transaction (an idle release records itself there)."""
        now = self.clock()
        async with self.store.write() as conn:
            current = await self._current(conn, reservation_id)
            refusals = end_now_refusals(actor, current.current, now)
            if refusals:
                raise refusal_error(refusals)
            await writes.update_reservation(
                conn, reservation_id, end_ms=to_ms(now), updated_at_ms=to_ms(now)
            )
            ended = await self._finish(
                conn, reservation_id, "reservation.updated", changed=["end"], actor=actor.username
            )
            if also is not None:
                await also(conn)
        self.on_commit()
        return ended

    # --- access rules -------------------------------------------------------------------------

    @staticmethod
    def _valid_rule(rule: AccessRule) -> None:
        problems = rule_problems(rule)
        if problems:
            raise InvalidRequest(
                "invalid access rule: "
                + "; ".join(f"{key}: {reason}" for key, reason in sorted(problems.items())),
                {"errors": problems},
            )

    async def create_rule(
        self, actor: Actor, rule: AccessRule, description: str = ""
    ) -> dict[str, Any]:
        self.require_admin(actor)
        self._valid_rule(rule)
        now_ms = to_ms(self.clock())
        async with self.store.write() as conn:
            result = await conn.execute(
                insert(access_rules)
                .values(
                    **repository.rule_values(rule),
                    description=description,
                    created_by=actor.username,
                    created_at_ms=now_ms,
                    updated_at_ms=now_ms,
                )
                .returning(access_rules.c.id)
            )
            rule_id = int(result.scalar_one())
            changed = await self.recheck(
                conn,
                actor,
                cause="rule.created",
                rule_id=rule_id,
                owners=await _subjects(conn, [rule]),
            )
            row = await repository.rule_row(conn, rule_id)
        self.on_commit()
        assert row is not None
        return {**repository.rule_dict(row), **vars(changed)}

    async def update_rule(
        self, actor: Actor, rule: AccessRule, description: str | None = None
    ) -> dict[str, Any]:
        self.require_admin(actor)
        self._valid_rule(rule)
        async with self.store.write() as conn:
            before = await repository.rule_row(conn, rule.id)
            if before is None:
                raise NotFound(f"no access rule {rule.id}", {"id": rule.id})
            affected = await _subjects(conn, [repository.rule_from_row(before), rule])
            values = repository.rule_values(rule)
            if description is not None:
                values["description"] = description
            await conn.execute(
                update(access_rules)
                .where(access_rules.c.id == rule.id)
                .values(**values, updated_at_ms=to_ms(self.clock()))
            )
            changed = await self.recheck(
                conn, actor, cause="rule.updated", rule_id=rule.id, owners=affected
            )
            row = await repository.rule_row(conn, rule.id)
        self.on_commit()
        assert row is not None
        return {**repository.rule_dict(row), **vars(changed)}

    async def delete_rule(self, actor: Actor, rule_id: int) -> dict[str, Any]:
        self.require_admin(actor)
        async with self.store.write() as conn:
            before = await repository.rule_row(conn, rule_id)
            if before is None:
                raise NotFound(f"no access rule {rule_id}", {"id": rule_id})
            affected = await _subjects(conn, [repository.rule_from_row(before)])
            await conn.execute(delete(access_rules).where(access_rules.c.id == rule_id))
            changed = await self.recheck(
                conn, actor, cause="rule.deleted", rule_id=rule_id, owners=affected
            )
        self.on_commit()
        return {"id": rule_id, "cancelled": changed.cancelled, "restored": changed.restored}

    @staticmethod
    def require_admin(actor: Actor) -> None:
        accounts.require_admin(actor)

    async def recheck(
        self,
        conn: AsyncConnection,
        actor: Actor,
        *,
        cause: str,
        rule_id: int | None = None,
        group: str | None = None,
        username: str | None = None,
        owners: set[str] | None = None,
    ) -> Changed:
        """After an access change: cancel future reservations no longer allowed, restore the
        ones an earlier change cancelled that are allowed and free again; one event each.

        `owners`: only their reservations can be affected (None: everyone's).
        """
        now = self.clock()
        rules = await repository.load_rules(conn)
        members: dict[str, Member] = {}
        every_gpu = await repository.load_gpus(conn)
        # Every active reservation that can count against a future one (quotas look back a
        # week), indexed by owner for limits and by GPU for restoring.
        active_rows = await repository.slots_in_range(conn, to_ms(now - QUOTA_MARGIN), 2**62)
        active = {b.id: b for b in repository.bookings_from_slots(active_rows)}
        by_owner: dict[str, dict[int, Booking]] = {}
        for held in active.values():
            by_owner.setdefault(held.owner, {})[held.id] = held
        cancelled: list[int] = []
        restored: list[int] = []

        async def refusals_for(booking: Booking) -> list[Refusal]:
            if booking.owner not in members:
                groups = await accounts.member_groups(conn, booking.owner) or frozenset()
                members[booking.owner] = Member(booking.owner, groups)
            member = members[booking.owner]
            requested = [every_gpu[uuid] for uuid in booking.gpus if uuid in every_gpu]
            others = [b for b in by_owner.get(booking.owner, {}).values() if b.id != booking.id]
            applicable = [r for r in rules if rule_applies_to(r, member)]
            return access_refusals(
                member, applicable, requested, booking.start, booking.end, others, every_gpu
            )

        future = sorted(
            (b for b in active.values() if b.start > now and (owners is None or b.owner in owners)),
            key=lambda b: (b.start, b.id),
        )
        for booking in future:
            refusals = await refusals_for(booking)
            if not refusals:
                continue
            del active[booking.id]
            del by_owner[booking.owner][booking.id]
            await writes.update_reservation(
                conn,
                booking.id,
                status="cancelled",
                cancelled_at_ms=to_ms(now),
                cancelled_by=actor.username,
                cancel_reason="access changed: " + "; ".join(r.message for r in refusals),
                cancelled_by_rules=True,
                updated_at_ms=to_ms(now),
            )
            await self._finish(conn, booking.id, "reservation.cancelled", by_rules=True)
            cancelled.append(booking.id)

        query = (
            select(reservations.c.id)
            .where(
                reservations.c.status == "cancelled",
                reservations.c.cancelled_by_rules.is_(True),
                reservations.c.start_ms > to_ms(now),
            )
            .order_by(reservations.c.created_at_ms, reservations.c.id)
        )
        if owners is not None:
            query = query.where(reservations.c.owner.in_(sorted(owners)))
        candidates = await conn.execute(query)
        candidate_ids = [row.id for row in candidates if row.id not in cancelled]
        found = await repository.records(conn, candidate_ids)
        for candidate_id in candidate_ids:  # the earliest booked is restored first
            booking = found[candidate_id].booking
            busy = any(
                other.gpus & booking.gpus and other.interval.overlaps(booking.interval)
                for other in active.values()
            )
            if busy or await refusals_for(booking):
                continue
            await writes.update_reservation(
                conn,
                booking.id,
                status="active",
                cancelled_at_ms=None,
                cancelled_by=None,
                cancel_reason=None,
                cancelled_by_rules=False,
                updated_at_ms=to_ms(now),
            )
            await self._finish(
                conn, booking.id, "reservation.updated", changed=["status"], actor=actor.username
            )
            active[booking.id] = booking
            by_owner.setdefault(booking.owner, {})[booking.id] = booking
            restored.append(booking.id)

        await add_event(
            conn,
            "access.changed",
            {
                "cause": cause,
                "rule_id": rule_id,
                "group": group,
                "username": username,
                "actor": actor.username,
                "cancelled": cancelled,
                "restored": restored,
            },
        )
        return Changed(cancelled, restored)


async def _subjects(conn: AsyncConnection, rules: Sequence[AccessRule]) -> set[str]:
    """Usernames the rules apply to: their users and the members of their groups."""
    names = {user for rule in rules for user in rule.users}
    groups = {group for rule in rules for group in rule.groups}
    if groups:
        for group in await accounts.list_groups(conn):
            if group["name"] in groups:
                names.update(group["members"])
    return names
