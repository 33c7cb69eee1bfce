"""The idle watch: applies `idle.py` to running reservations, tells owners, releases.

Figures come from the usage tracker (each host.sampled, per reservation); every second the
watch folds them into each running reservation's state, writes a state whose persisted part
changed (so a restart neither tells twice nor skips a release), and does what is due.

The notice starts when it is due: from then the owner's UI shows it (`GET /me/idle`, the banner)
and the grace runs. Its message goes through the notifications' one path (`violations.notify`,
keyed so a message sent again is sent once) and is best effort: a failure is logged once and
tried again every `notify_retry` (NOTIFY_RETRY), after a restart too (`sent_notices`), and
never holds back the release: a lost message does not keep an idle GPU booked for ever. Nothing
is released without a notice given and its grace passed, and only where an admin turned a
rule's policy on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select

from services.accounts.api import Actor
from services.notifications import api as notifications_api
from services.reservations.booking import repository
from services.reservations.booking.changes import Changes
from services.reservations.booking.lifecycle import Figure
from services.reservations.booking.memory import ReadDirectory
from services.reservations.idle import rows as idle_store
from services.reservations.idle.policy import (
    Action,
    IdleState,
    decide,
    kept,
    link_token,
    notified,
    observe,
    read_token,
)
from services.reservations.outbox import add_event
from services.reservations.rules.access import idle_policy_of
from services.reservations.rules.domain import IdlePolicy
from services.reservations.store import Store, to_ms
from services.reservations.tables import reservations
from services.shared.bus import Bus
from services.shared.cluster.background import cancel_and_wait
from services.shared.errors import Forbidden, NotFound, StateConflict
from services.shared.failures import Retrying

log = logging.getLogger("warden.reservations.idle")

TICK_S = 1.0
REFRESH_S = 5.0
NOTIFY_RETRY = timedelta(seconds=30)
NOTIFY_TIMEOUT_S = 10.0
SYSTEM = Actor("warden", True)  # who ends a reservation released for want of an answer
LINK_GONE = (
    "no idle notice of this reservation waits for an answer: it was answered (a link works "
    "once), the reservation was released or ended, or its GPUs are busy again"
)


@dataclass
class Running:
    owner: str
    title: str
    end_ms: int
    policy: IdlePolicy | None


class IdleWatch:
    def __init__(
        self,
        store: Store,
        changes: Changes,
        bus: Bus | None,
        *,
        secret: str,
        link_base: str,
        stale_after: timedelta,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        directory: ReadDirectory | None = None,
        notify_retry: timedelta = NOTIFY_RETRY,
    ) -> None:
        self.store = store
        self.changes = changes
        # Owners' groups, rules and GPUs: from memory, checked against the version counter.
        self.directory = directory or ReadDirectory()
        self.bus = bus
        self.secret = secret
        self.link_base = link_base.rstrip("/")
        self.stale_after = stale_after
        self.clock = clock
        self.notify_retry = notify_retry  # after a message that failed, the next try
        self._pending: dict[int, list[tuple[datetime, list[Figure]]]] = {}
        self._states: dict[int, IdleState] = {}
        self._running: dict[int, Running] = {}
        self._refreshed_at: datetime | None = None
        self._retry_at: dict[int, datetime] = {}
        self._failing: set[int] = set()
        self._unsent: dict[int, int] = {}  # notices the notification path has not taken yet
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None

    # --- input --------------------------------------------------------------------------------

    def on_figures(self, reservation_id: int, at: datetime, values: list[Figure]) -> None:
        self._pending.setdefault(reservation_id, []).append((at, list(values)))

    def invalidate(self) -> None:
        self._refreshed_at = None

    def policy_of(self, reservation_id: int) -> IdlePolicy | None:
        """The policy of a running reservation as of the last check (None: none, or not running)."""
        run = self._running.get(reservation_id)
        return None if run is None else run.policy

    # --- the loop -----------------------------------------------------------------------------

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="reservations idle watch")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def _run(self) -> None:
        retrying = Retrying(log, "the idle watch (idle reservations given back)")
        while True:
            try:
                await self.tick()
            except Exception as err:
                await asyncio.sleep(retrying.failed(err))
            else:
                retrying.succeeded()
                await asyncio.sleep(TICK_S)

    async def _refresh(self, now: datetime) -> None:
        now_ms = to_ms(now)
        async with self.store.read() as conn:
            slots = await repository.slots_in_range(conn, now_ms, now_ms + 1)
            by_id: dict[int, list[str]] = {}
            for slot in slots:
                by_id.setdefault(slot.reservation_id, []).append(slot.gpu_uuid)
            ids = sorted(by_id)
            found = (
                list(
                    await conn.execute(
                        select(
                            reservations.c.id,
                            reservations.c.owner,
                            reservations.c.title,
                            reservations.c.end_ms,
                        ).where(reservations.c.id.in_(ids), reservations.c.status == "active")
                    )
                )
                if ids
                else []
            )
            directory = await self.directory.get(conn)
            stored = await idle_store.rows(conn, ids)
        rules = list(directory.rules)
        running: dict[int, Running] = {}
        for row in found:
            state_row = stored.get(row.id)
            if state_row is not None and state_row.outcome is not None:
                continue  # released already
            member = directory.member(row.owner)
            if member is None:
                raise NotFound(f"no user named {row.owner!r}", {"user": row.owner})
            policy = idle_policy_of(rules, member, by_id[row.id], directory.gpus, now)
            running[row.id] = Running(row.owner, row.title, row.end_ms, policy)
            seen = self._states.get(row.id, IdleState()).seen_at
            if state_row is not None:
                self._states[row.id] = replace(idle_store.state_of(state_row), seen_at=seen)
                waiting = state_row.notified_at_ms is not None
                if waiting and state_row.sent_notices < state_row.notices:
                    self._unsent[row.id] = state_row.notices
                else:
                    self._unsent.pop(row.id, None)
        self._running = running
        for gone in set(self._states) - set(running):
            self._states.pop(gone, None)
        for gone in set(self._unsent) - set(running):
            self._unsent.pop(gone, None)
        self._refreshed_at = now

    async def tick(self) -> None:  # noqa: C901 - each reservation's state machine step
        async with self._lock:
            now = self.clock()
            if self._refreshed_at is None or now - self._refreshed_at >= timedelta(
                seconds=REFRESH_S
            ):
                await self._refresh(now)
            pending, self._pending = self._pending, {}
            due: list[tuple[int, Action]] = []
            for reservation_id, run in self._running.items():
                if run.policy is None:
                    # No policy (any more): a notice waiting for an answer is void.
                    gone = self._states.pop(reservation_id, None)
                    if gone is not None and (gone.since or gone.notified_at):
                        await self._save(
                            reservation_id, run.owner, replace(gone, since=None, notified_at=None)
                        )
                    continue
                before = self._states.get(reservation_id, IdleState())
                state = before
                for at, values in sorted(pending.get(reservation_id, []), key=lambda p: p[0]):
                    state = observe(state, run.policy, values, at)
                if idle_store.stored(state) != idle_store.stored(before):
                    await self._save(reservation_id, run.owner, state)
                self._states[reservation_id] = state
                action = decide(state, run.policy, now, self.stale_after)
                if action is not None:
                    due.append((reservation_id, action))
        for reservation_id, notice in list(self._unsent.items()):
            if self._states.get(reservation_id, IdleState()).notices == notice:
                await self._send(reservation_id, notice, now)
        for reservation_id, action in due:
            if action == "notify":
                await self._notify(reservation_id, now)
            else:
                await self._release_unanswered(reservation_id)

    async def _save(self, reservation_id: int, owner: str, state: IdleState) -> None:
        async with self.store.write() as conn:
            await idle_store.save(conn, reservation_id, owner, state, to_ms(self.clock()))

    # --- actions ------------------------------------------------------------------------------

    def links(self, reservation_id: int, notice: int) -> list[dict[str, str]]:
        token = link_token(self.secret, reservation_id, notice)
        url = f"{self.link_base}/idle/{token}"
        return [
            {"label": "I still need it", "url": f"{url}?action=keep"},
            {"label": "Release now", "url": f"{url}?action=release"},
        ]

    async def _notify(self, reservation_id: int, now: datetime) -> None:
        """Start the notice (the grace runs from now; the UI shows it at once), then send it."""
        run = self._running.get(reservation_id)
        if run is None or run.policy is None:
            return
        async with self._lock:
            current = self._states.get(reservation_id)
            if current is None or current.since is None or current.notified_at is not None:
                return  # busy again (or answered) meanwhile
            told = notified(current, now)
            await self._save(reservation_id, run.owner, told)
            self._states[reservation_id] = told
        log.info("reservation %d of %s is idle: telling them", reservation_id, run.owner)
        await self._send(reservation_id, told.notices, now)

    async def _send(self, reservation_id: int, notice: int, now: datetime) -> None:
        """Hand the notice to the notification path (best effort: tried again later)."""
        run = self._running.get(reservation_id)
        if run is None or run.policy is None or self.bus is None:
            return
        if now < self._retry_at.get(reservation_id, now):
            return
        grace = run.policy.grace_minutes
        try:
            await notifications_api.NOTIFY.call(
                self.bus,
                {
                    "user": run.owner,
                    "kind": "reservation_idle",
                    "title": f"Your reservation '{run.title}' is idle",
                    "text": (
                        f"The GPUs of your reservation '{run.title}' (#{reservation_id}) have "
                        f"been idle for {_minutes(run.policy.for_minutes)}. Unless you say you "
                        f"still need it, the rest of it is released in {_minutes(grace)} so "
                        "others can use the GPUs."
                    ),
                    "links": self.links(reservation_id, notice),
                    "key": f"reservation:{reservation_id}:idle:{notice}",
                },
                timeout=NOTIFY_TIMEOUT_S,
            )
        except Exception as err:
            self._unsent[reservation_id] = notice
            self._retry_at[reservation_id] = now + self.notify_retry
            if reservation_id not in self._failing:
                self._failing.add(reservation_id)
                log.warning(
                    "could not tell %s that reservation %d is idle (%s); trying again",
                    run.owner,
                    reservation_id,
                    err,
                )
            return
        self._failing.discard(reservation_id)
        self._retry_at.pop(reservation_id, None)
        self._unsent.pop(reservation_id, None)
        async with self.store.write() as conn:
            await idle_store.mark_sent(conn, reservation_id, notice)

    async def _release_unanswered(self, reservation_id: int) -> None:
        run = self._running.get(reservation_id)
        if run is None:
            return
        try:
            await self.release(reservation_id, SYSTEM, "released_idle", None)
        except (StateConflict, Forbidden):
            # Answered, ended, or released by another replica meanwhile: nothing left to do.
            async with self._lock:
                self._states.pop(reservation_id, None)
            self.invalidate()

    async def release(
        self, reservation_id: int, actor: Actor, outcome: str, notice: int | None
    ) -> dict[str, Any]:
        """End the rest of the reservation now and say so (reservation.released_idle), in one
        transaction with claiming its pending notice; StateConflict when none is pending."""
        now_ms = to_ms(self.clock())

        async def record(conn: Any) -> None:
            if not await idle_store.claim(
                conn, reservation_id, notice, idle_store.released_values(outcome, now_ms)
            ):
                raise StateConflict(LINK_GONE, {"reservation": reservation_id})
            found = await repository.record(conn, reservation_id)
            state = await idle_store.row(conn, reservation_id)
            assert found is not None and state is not None
            known = await repository.load_gpus(conn, found.gpu_uuids)
            await add_event(
                conn,
                "reservation.released_idle",
                {
                    **found.event_data(known),
                    "reason": "idle",
                    "released_by": "owner" if outcome == "released_by_owner" else "warden",
                    **{k: v for k, v in idle_store.describe(state).items() if k != "outcome"},
                },
            )

        async with self.store.read() as conn:  # said first: no notice is a 409, whatever else
            waiting = await idle_store.row(conn, reservation_id)
        if waiting is None or waiting.notified_at_ms is None or waiting.outcome is not None:
            raise StateConflict(LINK_GONE, {"reservation": reservation_id})
        ended = await self.changes.end_now(actor, reservation_id, record)
        async with self._lock:
            run = self._running.pop(reservation_id, None)
            self._states.pop(reservation_id, None)
        owner = run.owner if run is not None else str(ended["owner"])
        title = run.title if run is not None else str(ended["title"])
        log.info("released idle reservation %d of %s (%s)", reservation_id, owner, outcome)
        await self._tell_released(reservation_id, owner, title, outcome)
        return ended

    async def _tell_released(
        self, reservation_id: int, owner: str, title: str, outcome: str
    ) -> None:
        if self.bus is None:
            return
        why = (
            "as you asked"
            if outcome == "released_by_owner"
            else "because its GPUs stayed idle and there was no answer to the notice"
        )
        try:
            await notifications_api.NOTIFY.call(
                self.bus,
                {
                    "user": owner,
                    "kind": "reservation_released",
                    "title": f"Your reservation '{title}' was released",
                    "text": f"The rest of your reservation '{title}' (#{reservation_id}) was "
                    f"released {why}; its GPUs are free for others now.",
                    "key": f"reservation:{reservation_id}:released",
                },
                timeout=NOTIFY_TIMEOUT_S,
            )
        except Exception as err:  # the release stands; only the message is lost
            log.warning(
                "could not tell %s that reservation %d was released (%s)",
                owner,
                reservation_id,
                err,
            )

    async def keep(self, reservation_id: int, notice: int | None) -> dict[str, Any]:
        """ "I still need it": snooze the policy for the reservation (its notice answered)."""
        async with self._lock:
            if self._refreshed_at is None:
                await self._refresh(self.clock())
            run = self._running.get(reservation_id)
            state = self._states.get(reservation_id, IdleState())
            if run is None or run.policy is None:
                raise StateConflict(LINK_GONE, {"reservation": reservation_id})
            now = self.clock()
            after = kept(state, run.policy, now)
            async with self.store.write() as conn:
                values = idle_store.kept_values(after, to_ms(now))
                if not await idle_store.claim(conn, reservation_id, notice, values):
                    raise StateConflict(LINK_GONE, {"reservation": reservation_id})
            self._states[reservation_id] = after
        assert after.snoozed_until is not None
        return {"id": reservation_id, "snoozed_until": after.snoozed_until.isoformat()}

    def token_target(self, token: str) -> tuple[int, int]:
        found = read_token(self.secret, token)
        if found is None:
            raise NotFound("no idle notice has this link")
        return found


def _minutes(value: float) -> str:
    if value < 1:
        return f"{round(value * 60)} seconds"
    return f"{value:g} minutes"
