"""Reminders before a reservation starts and ends, at each owner's lead times.

The reservations come from the violations service's own copy of the calendar (loaded from the
reservations service at start, kept from its events). A reminder's key names the reservation,
the kind and the time it reminds of: after a restart nothing is sent twice, and a moved
reservation is reminded of again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from services.shared.cluster.background import cancel_and_wait
from services.shared.failures import describe_failure, outage
from services.shared.reservation_book import Holding

log = logging.getLogger("warden.notifications")

MAX_SLEEP_S = 60.0  # looks again at least this often (a lead time changed meanwhile)
# The longest lead time a user may choose (services/notifications/api.py): a reservation that
# starts later than this after the next pass has no reminder due before it.
MAX_LEAD = timedelta(minutes=1440)
# Woken by changes, a pass comes at most this often: a stream of bookings (hundreds a second)
# shares passes, each of which looks at every reservation held; reminders are in minutes.
MIN_GAP_S = 1.0

# owner -> (start lead, end lead) in minutes
Leads = Callable[[Iterable[str]], Awaitable[dict[str, tuple[int, int]]]]


@dataclass(frozen=True)
class Due:
    note: dict[str, Any]
    at: datetime  # when it is due


def _gpus(held: Holding) -> str:
    return ", ".join(
        f"{host} GPU {index}" if index is not None else host
        for host, index in sorted(held.gpus.values(), key=lambda g: (g[0], g[1] or 0))
    )


_KINDS = (("reservation_starting", "starts"), ("reservation_ending", "ends"))


def _note(held: Holding, kind: str, verb: str, at: datetime) -> dict[str, Any]:
    return {
        "user": held.owner,
        "kind": kind,
        "title": f"Your reservation #{held.reservation_id} {verb} soon",
        "text": f"Reservation #{held.reservation_id} on {_gpus(held)} {verb} at "
        f"{at.astimezone(UTC):%Y-%m-%d %H:%M} UTC.",
        "key": f"reservation:{held.reservation_id}:{kind}:{at.isoformat()}",
    }


def reminders(held: Holding, start_lead_min: int, end_lead_min: int) -> list[Due]:
    """The two reminders of one reservation, with when each is due (pure)."""
    return [
        Due(_note(held, kind, verb, at), at - timedelta(minutes=lead))
        for (kind, verb), at, lead in zip(
            _KINDS, (held.start, held.end), (start_lead_min, end_lead_min), strict=True
        )
    ]


def plan(
    holdings: Iterable[Holding], leads: dict[str, tuple[int, int]], now: datetime
) -> tuple[list[dict[str, Any]], datetime | None]:
    """(notes due now, when the next one is due) for `holdings` (pure). A note is written
    only for a reminder due now: a pass looks at every reservation held, after every change."""
    due: list[dict[str, Any]] = []
    upcoming: datetime | None = None
    for held in holdings:
        start_lead, end_lead = leads.get(held.owner, (10, 10))
        for (kind, verb), moment, lead in zip(
            _KINDS, (held.start, held.end), (start_lead, end_lead), strict=True
        ):
            if now >= moment:
                continue  # it has started (or ended): too late to remind
            at = moment - timedelta(minutes=lead)
            if at <= now:
                minutes = math.ceil((moment - now).total_seconds() / 60)
                note = _note(held, kind, verb, moment)
                note["text"] = f"{note['text']} (in {minutes} min)"
                due.append(note)
            elif upcoming is None or at < upcoming:
                upcoming = at
    return due, upcoming


class Reminders:
    def __init__(
        self,
        holdings: Callable[[], list[Holding]],
        leads: Leads,
        notify: Callable[[dict[str, Any]], Awaitable[Any]],
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
    ) -> None:
        self.holdings = holdings
        self.leads = leads
        self.notify = notify
        self.clock = clock
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._next_pass: datetime | None = None  # None: a pass is coming now
        # Bookings that came while a pass ran: whether one needs another pass is known when
        # this one has planned the next (waking for each made a pass every MIN_GAP_S under a
        # stream of bookings, each looking at every reservation held).
        self._passing = False
        self._changed_in_pass: list[Holding] = []
        # Keys sent since the start, kept until what each reminds of has passed: a pass sends
        # a due reminder once (the notifier's keys hold across restarts), not on every pass.
        self._sent: dict[str, datetime] = {}

    def wake(self) -> None:
        """Look again now: reservations or lead times changed."""
        self._next_pass = None
        self._wake.set()

    def changed(self, held: Holding | None) -> None:
        """A reservation was booked or moved (None: it was cancelled or ended, nothing to
        remind of). A pass comes now only if one of its reminders may be due before the next
        one planned: a stream of bookings weeks ahead costs no pass each."""
        if held is None:
            return
        if self._passing:
            self._changed_in_pass.append(held)
            return
        planned = self._next_pass
        if planned is None or min(held.start, held.end) - MAX_LEAD <= planned:
            self.wake()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run())

    async def stop(self) -> None:
        await cancel_and_wait(self._task)

    async def pass_once(self) -> datetime | None:
        """Send what is due; when the next one is."""
        held = self.holdings()
        leads = await self.leads({h.owner for h in held})
        now = self.clock()
        due, upcoming = plan(held, leads, now)
        for key, until in list(self._sent.items()):
            if until <= now:  # what it reminds of has passed: never due again
                del self._sent[key]
        for note in due:
            if note["key"] in self._sent:
                continue
            await self.notify(note)  # the key makes a second pass send nothing
            self._sent[note["key"]] = now + MAX_LEAD  # a due reminder's moment comes sooner
        return upcoming

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            began = loop.time()
            self._wake.clear()
            self._next_pass = None
            self._passing = True
            try:
                upcoming = await self.pass_once()
            except Exception as err:  # the service may be starting: try again later
                if outage(err):  # the database or a service away: no traceback for that
                    log.warning("reminders: a pass failed (%s); retrying", describe_failure(err))
                else:
                    log.exception("reminders: a pass failed")
                upcoming = None
            finally:
                self._passing = False
            wait = MAX_SLEEP_S
            if upcoming is not None:
                wait = min(wait, max((upcoming - self.clock()).total_seconds(), 0.05))
            if not self._wake.is_set():
                self._next_pass = self.clock() + timedelta(seconds=wait)
            changed, self._changed_in_pass = self._changed_in_pass, []
            for held in changed:  # (the pass may not have seen them)
                self.changed(held)
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait):  # (3.11's wait_for can swallow a cancel)
                    await self._wake.wait()
            rest = began + MIN_GAP_S - loop.time()
            if rest > 0 and self._wake.is_set():
                await asyncio.sleep(rest)  # the changes of the next moments share this pass
