"""New reservations: checked against the in-memory model (`booking.memory`) and written by
group commit (`booking.group_commit`).

What a create reads (the actor, the owner's groups, the rules, the GPUs, the GPUs' bookings)
comes from memory, brought up to date by one version query per batch. A request that passes
is held as pending (in the slot index under a placeholder id, so the next requests of the
batch see it) and written at the end of the batch with the others (`booking.writes`:
one SAVEPOINT each). The pending ones are written earlier when a request clashes
with one of them (its refusal names the real reservation id) or has quota rules (its owner's
bookings are read from the database, in the transaction).

The database stays the final guard: its constraint refuses an overlap this replica did not
know of (another replica's booking), which answers 409 with the reasons read back from the
database, never a 500, and that GPU's slots are loaded again.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts.api import Actor
from services.reservations.booking import create_keys, repository
from services.reservations.booking.create_keys import CreateKey
from services.reservations.booking.group_commit import Answer, GroupWriter
from services.reservations.booking.memory import Memory
from services.reservations.booking.repository import ReservationRecord
from services.reservations.booking.writes import Row, write_rows
from services.reservations.maintenance import rows as maintenance
from services.reservations.rules.access import access_refusals, rule_applies_to
from services.reservations.rules.domain import Gpu, Refusal
from services.reservations.rules.gpu_health import failed_gpu_refusals
from services.reservations.rules.maintenance import Window, maintenance_refusals
from services.reservations.rules.mig import split_refusals
from services.reservations.rules.refusals import (
    START_GRACE,
    DurationBounds,
    conflict_refusals,
    guest_refusals,
    interval_refusals,
    refusal_error,
    removed_host_refusals,
    text_refusals,
)
from services.reservations.store import Store, lock_owner, lock_owners, to_ms
from services.shared.errors import Forbidden, InvalidRequest, NotFound, ReservationConflict


@dataclass(frozen=True)
class Request:
    actor: Actor | str  # a bare username: looked up in memory, in the transaction
    owner: str
    uuids: list[str]  # sorted, unique
    start: datetime
    end: datetime
    title: str
    description: str
    guests: tuple[str, ...]  # sorted, unique
    now: datetime
    key: CreateKey | None = None  # asked again with this key: answered with what it made

    def fingerprint(self) -> str:
        return create_keys.fingerprint(
            self.owner,
            self.uuids,
            to_ms(self.start),
            to_ms(self.end),
            self.title,
            self.description,
            self.guests,
        )


@dataclass
class _Pending:
    """A request that passed its checks, waiting to be written with its batch."""

    request: Request
    created_by: str
    gpus: dict[str, Gpu]
    start_ms: int
    end_ms: int
    now_ms: int
    placeholder: int  # its id in the slot index until written (negative)
    written: int | Exception | None = field(default=None)

    def record(self, reservation_id: int) -> ReservationRecord:
        # Built from what is written: no need to read it back.
        return ReservationRecord(
            id=reservation_id,
            owner=self.request.owner,
            title=self.request.title.strip(),
            description=self.request.description,
            start_ms=self.start_ms,
            end_ms=self.end_ms,
            status="active",
            created_by=self.created_by,
            created_at_ms=self.now_ms,
            updated_at_ms=self.now_ms,
            cancelled_at_ms=None,
            cancelled_by=None,
            cancel_reason=None,
            cancelled_by_rules=False,
            started_event_ms=None,
            ended_event_ms=None,
            usage=None,
            gpu_uuids=tuple(self.request.uuids),
            guests=self.request.guests,
        )

    def row(self) -> Row:
        return Row(
            owner=self.request.owner,
            title=self.request.title.strip(),
            description=self.request.description,
            start_ms=self.start_ms,
            end_ms=self.end_ms,
            created_by=self.created_by,
            now_ms=self.now_ms,
            gpu_uuids=self.request.uuids,
            guests=self.request.guests,
            event=lambda reservation_id: self.record(reservation_id).event_data(self.gpus),
            key=None if self.request.key is None else self.request.key.value,
            fingerprint="" if self.request.key is None else self.request.fingerprint(),
        )

    def answer(self) -> dict[str, Any]:
        if isinstance(self.written, Exception):
            raise self.written
        assert self.written is not None
        return self.record(self.written).to_dict(self.gpus)


class Creates:
    def __init__(
        self,
        store: Store,
        bounds: DurationBounds,
        *,
        on_commit: Callable[[int], None],
        host_offered: Callable[[str], bool],
        quota_margin: timedelta,
    ) -> None:
        self.bounds = bounds
        self.host_offered = host_offered
        self.quota_margin = quota_margin
        self.memory = Memory()
        self._pending: list[_Pending] = []
        # GPUs of the requests waiting: a slot load takes theirs too (one query, not one each).
        self._wanted: Counter[str] = Counter()
        self._locked: set[str] = set()  # owners this batch's transaction holds (PostgreSQL)
        # The earliest start this batch wrote (flushes may come earlier); None: nothing written.
        self._earliest: int | None = None
        self.on_commit = on_commit  # with that start: what wakes depends on how soon it is
        self._placeholders = itertools.count(-1, -1)
        self._keys = create_keys.Pruner()
        self._windows: list[Window] = []  # maintenance windows not over, read per batch
        self.writer = GroupWriter(
            store,
            prepare=self._prepare,
            finish=self._finish,
            on_commit=self._committed,
            on_failure=self._failed,
        )

    async def create(self, request: Request) -> dict[str, Any]:
        if isinstance(request.actor, Actor):  # else: refused in the job, once the actor is known
            refusals = self._plain_refusals(request, request.actor)
            if refusals:
                raise refusal_error(refusals)
        self._wanted.update(request.uuids)
        try:
            answer: dict[str, Any] = await self.writer.submit(
                lambda conn: self._check(conn, request), request
            )
        finally:
            self._wanted.subtract(request.uuids)
        return answer

    def _plain_refusals(self, request: Request, actor: Actor | str) -> list[Refusal]:
        """What needs no database (an actor given by name: its admin flag is checked later)."""
        refusals = (
            text_refusals(request.title, request.description)
            + interval_refusals(
                request.start, request.end, self.bounds, request.now, new_start=True
            )
            + guest_refusals(request.owner, request.guests)
        )
        if isinstance(actor, Actor) and request.owner != actor.username and not actor.is_admin:
            refusals.insert(0, Refusal("forbidden", "only admins reserve for someone else"))
        if not request.uuids:
            refusals.append(Refusal("invalid", "choose at least one GPU", {"field": "gpus"}))
        return refusals

    async def _check(  # noqa: C901 - the hot path of a create: every refusal in one pass
        self, conn: AsyncConnection, request: Request
    ) -> Answer:
        """Check `request` against memory (and the database for quotas); hold it as pending."""
        if request.key is not None and request.key.look_up:
            repeat = await self._repeat(conn, request, request.key)
            if repeat is not None:
                return repeat
        directory = self.memory.directory
        if isinstance(request.actor, str):
            actor = directory.actor(request.actor)
            if actor is None:
                raise Forbidden(f"unknown user {request.actor!r}", {"actor": request.actor})
            refusals = self._plain_refusals(request, actor)
            if refusals:
                raise refusal_error(refusals)
        else:
            actor = request.actor
        member = directory.member(request.owner)
        if member is None:
            raise NotFound(f"no user named {request.owner!r}", {"user": request.owner})
        uuids = request.uuids
        missing = [uuid for uuid in uuids if uuid not in directory.gpus]
        if missing:
            raise InvalidRequest(
                f"unknown GPU {', '.join(missing)}", {"field": "gpus", "unknown": missing}
            )
        unknown = directory.unknown_users(request.guests)
        if unknown:
            raise InvalidRequest(
                f"unknown user {', '.join(unknown)} in guests",
                {"field": "guests", "unknown": unknown},
            )
        gpus = {uuid: directory.gpus[uuid] for uuid in uuids}
        start_ms, end_ms = to_ms(request.start), to_ms(request.end)
        applicable = [rule for rule in directory.rules if rule_applies_to(rule, member)]
        limited = any(rule.limits.any for rule in applicable)
        if limited:  # the owner's bookings come from the database: write the pending first
            await self._flush(conn)
            if request.owner not in self._locked:  # (locked in _prepare, unless rules moved)
                await lock_owner(conn, request.owner)
                self._locked.add(request.owner)
        slots = self.memory.slots
        await slots.load(
            conn,
            uuids,
            to_ms(request.now - START_GRACE),
            also=(uuid for uuid, n in self._wanted.items() if n > 0),
        )
        clashes = slots.clashes(uuids, start_ms, end_ms)
        if any(clash.reservation_id < 0 for clash in clashes):  # name the real reservation
            await self._flush(conn)
            await slots.load(conn, uuids, to_ms(request.now - START_GRACE))
            clashes = slots.clashes(uuids, start_ms, end_ms)
        refusals = removed_host_refusals(gpus.values(), self.host_offered)
        refusals += failed_gpu_refusals(gpus.values())
        refusals += conflict_refusals(clashes, gpus)
        refusals += split_refusals(gpus.values(), directory.instances)
        refusals += maintenance_refusals(self._windows, gpus.values(), request.start, request.end)
        bookings = []
        if limited:
            bookings = await repository.owner_bookings(
                conn,
                request.owner,
                to_ms(request.start - self.quota_margin),
                to_ms(request.end + self.quota_margin),
            )
        refusals += access_refusals(
            member,
            applicable,
            list(gpus.values()),
            request.start,
            request.end,
            bookings,
            directory.gpus,
        )
        if refusals:
            raise refusal_error(refusals)
        pending = _Pending(
            request,
            actor.username,
            gpus,
            start_ms,
            end_ms,
            to_ms(request.now),
            placeholder=next(self._placeholders),
        )
        self._pending.append(pending)
        slots.add(uuids, start_ms, end_ms, pending.placeholder, request.owner)
        return pending.answer

    async def _repeat(
        self, conn: AsyncConnection, request: Request, key: CreateKey
    ) -> Answer | None:
        """The answer of the create already made with `request`'s key (None: none was)."""
        for held in self._pending:  # the same create twice in one batch
            if held.request.key is not None and held.request.key.value == key.value:
                if held.request.fingerprint() != request.fingerprint():
                    raise create_keys.different_request(key)
                return held.answer
        found = await create_keys.written(conn, key)
        if found is None:
            return None
        reservation_id, fingerprint = found
        if fingerprint != request.fingerprint():
            raise create_keys.different_request(key)
        made = await repository.record(conn, reservation_id)
        if made is None:  # (its key goes with it)
            return None
        known = self.memory.directory.gpus
        return lambda: made.to_dict(known)

    async def _flush(self, conn: AsyncConnection, *, last: bool = False) -> None:
        """Write the pending requests (one SAVEPOINT each); an overlap the database refuses
        is a 409 that says which booking, and those GPUs are loaded again. `last`: the
        transaction's last writes (see `write_rows`)."""
        pending, self._pending = self._pending, []
        written = await write_rows(conn, [p.row() for p in pending], last=last)
        for held, outcome in zip(pending, written, strict=True):
            uuids = held.request.uuids
            if isinstance(outcome, Exception):
                self.memory.slots.forget(uuids)
                if held.request.key is not None:  # another replica made it at the same moment?
                    made = await self._made_elsewhere(conn, held.request, held.request.key)
                    if made is not None:
                        held.written = made
                        continue
                found = await repository.clashes(conn, uuids, held.start_ms, held.end_ms)
                held.written = (
                    refusal_error(conflict_refusals(found, held.gpus))
                    if found
                    else ReservationConflict(
                        "a GPU was reserved by someone else at the same moment; try again",
                        {"reasons": []},
                    )
                )
            else:
                self.memory.slots.rename(uuids, held.start_ms, held.placeholder, outcome)
                held.written = outcome
                if self._earliest is None or held.start_ms < self._earliest:
                    self._earliest = held.start_ms

    async def _made_elsewhere(
        self, conn: AsyncConnection, request: Request, key: CreateKey
    ) -> int | Exception | None:
        found = await create_keys.written(conn, key)
        if found is None:
            return None
        if found[1] != request.fingerprint():
            return create_keys.different_request(key)
        return found[0]

    async def _prepare(self, conn: AsyncConnection, requests: list[Request]) -> None:
        """Sync the model; lock the owners whose quotas the batch checks, all at once and in
        name order, so two replicas' batches never wait for each other in a circle."""
        await self.memory.sync(conn)
        await self._keys.maybe(conn, to_ms(requests[0].now) if requests else 0)
        self._windows = await maintenance.windows(conn, min(to_ms(r.now) for r in requests))
        directory = self.memory.directory
        self._locked = set()
        for request in requests:
            member = directory.member(request.owner)
            if member is not None and any(
                rule.limits.any for rule in directory.rules if rule_applies_to(rule, member)
            ):
                self._locked.add(request.owner)
        await lock_owners(conn, sorted(self._locked))

    async def _finish(self, conn: AsyncConnection) -> bool:
        await self._flush(conn, last=True)
        return self._earliest is not None

    def _committed(self) -> None:
        earliest, self._earliest = self._earliest, None
        if earliest is not None:
            self.on_commit(earliest)

    def _failed(self) -> None:
        self._earliest = None
        self._pending = []
        self.memory.reset()
