"""The violations service's working state: reservations, open incidents, escalation.

Every change is written with its events (through the outbox) in one transaction, then applied
to memory. A snapshot that only sees an incident again moves its `last_seen_at` in memory; those
are written together, at most once per incident every `last_seen_every_s` (and when the tracker
stops), so an open incident's last sighting survives a restart without a write per poll.
One asyncio lock orders snapshots, reservation changes and escalation ticks. Only the leader
replica has a tracker (services/shared/cluster/leadership.py): its writes are fenced, and a
standby that takes over builds a fresh one from the database.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.shared.cluster.background import cancel_and_wait
from services.shared.config import ViolationSettings
from services.shared.failures import Retrying
from services.shared.reservation_book import ReservationBook
from services.shared.storage.outbox import add_event
from services.shared.storage.store import Store
from services.violations import repository
from services.violations.detector import Offence, SeenProcess, detect, with_mig_parents
from services.violations.incidents import (
    RESOLVED_GONE,
    RESOLVED_RESERVATION_CANCELLED,
    RESOLVED_RESERVATION_ENDED,
    Incident,
    Reconciled,
    open_incident,
    reconcile,
)
from services.violations.tables import outbox

log = logging.getLogger("warden.violations")

SOURCE = "violations"
# How often the sightings that change nothing else are written, at most (seconds).
LAST_SEEN_EVERY_S = 30.0
Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _time(value: Any) -> datetime | None:
    return None if value is None else datetime.fromisoformat(str(value))


def seen_processes(data: Mapping[str, Any]) -> list[SeenProcess]:
    """The processes of a `processes.observed` event."""
    return [
        SeenProcess(
            pid=p["pid"],
            user=p["user"],
            command=p["command"],
            gpu_uuid=p["gpu_uuid"],
            started_at=_time(p.get("started_at")),
            used_memory_mib=p.get("used_memory_mib"),
        )
        for p in data["processes"]
    ]


class Tracker:
    def __init__(
        self,
        store: Store,
        settings: ViolationSettings,
        *,
        on_commit: Callable[[], None] = lambda: None,
        clock: Clock = _utc_now,
        labels_of: Callable[[str], Collection[str]] = lambda _host: (),
        last_seen_every_s: float = LAST_SEEN_EVERY_S,
    ) -> None:
        self.store = store
        self.settings = settings
        # A host's labels, as the inventory has them now ([[violations.overrides]] labels).
        self.labels_of = labels_of
        self.on_commit = on_commit
        self.clock = clock
        self.book = ReservationBook()
        self.gpu_indexes: dict[str, int | None] = {}
        self.mig_parents: dict[str, str] = {}  # MIG instance uuid -> the GPU it is part of
        self._open: dict[str, Incident] = {}
        self._watermarks: dict[str, datetime] = {}
        # Incidents seen again since their row was written: id -> last seen at.
        self._unsaved: dict[str, datetime] = {}
        self._last_seen_every = timedelta(seconds=last_seen_every_s)
        self._last_seen_saved_at: datetime | None = None
        self._lock = asyncio.Lock()
        self._task: asyncio.Task[None] | None = None
        self._wake = asyncio.Event()
        # Until the reservations are loaded every GPU would look unreserved: a snapshot read
        # against an empty book would resolve open incidents that still go on (and open them
        # again as new ones once it loads). Snapshots are whole, so skipping them loses nothing.
        self.reservations_loaded = False
        self._skipped_snapshots = 0

    # -- start-up ---------------------------------------------------------------------------

    async def load(self) -> None:
        async with self.store.read() as conn:
            for incident in await repository.load_open(conn):
                self._open[incident.id] = incident
            self._watermarks = await repository.host_watermarks(conn)
        if self._open:
            log.info("%d open incidents reloaded", len(self._open))

    async def load_reservations(
        self, reservations: Iterable[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]
    ) -> None:
        """What the reservations service answered at start-up (events may have come first)."""
        async with self._lock:
            self.book.load(reservations)
            for gpu in gpus:
                self.gpu_indexes.setdefault(gpu["uuid"], gpu.get("index"))
                if gpu.get("mig_parent_uuid"):
                    self.mig_parents.setdefault(gpu["uuid"], gpu["mig_parent_uuid"])
            self.reservations_loaded = True
        if self._skipped_snapshots:
            log.info(
                "reservations loaded: checking processes again (%d snapshots skipped meanwhile)",
                self._skipped_snapshots,
            )

    # -- events -----------------------------------------------------------------------------

    def on_gpu_discovered(self, data: Mapping[str, Any]) -> None:
        self.gpu_indexes[data["uuid"]] = data.get("index")
        if data.get("mig_parent_uuid"):
            self.mig_parents[data["uuid"]] = data["mig_parent_uuid"]

    async def on_processes(self, data: Mapping[str, Any]) -> None:
        if not self.reservations_loaded:
            if not self._skipped_snapshots:
                log.info("waiting for the reservations before checking processes")
            self._skipped_snapshots += 1
            return
        host = data["host"]
        observed_at = datetime.fromisoformat(data["observed_at"])
        offences = detect(
            host,
            seen_processes(data),
            with_mig_parents(
                lambda gpu_uuid: self.book.holding(gpu_uuid, observed_at), self.mig_parents
            ),
            mode=self.settings.mode,
            allow=self.settings.allow,
        )
        async with self._lock:
            watermark = self._watermarks.get(host)
            if watermark is not None and observed_at <= watermark:
                return  # a duplicate or a late snapshot: a newer one was applied
            self._watermarks[host] = observed_at
            result = reconcile(
                [i for i in self._open.values() if i.host == host], offences, observed_at
            )
            for incident in result.seen:
                self._open[incident.id] = incident
                self._unsaved[incident.id] = incident.last_seen_at
            if not (result.opened or result.changed or result.resolved):
                return
            opened = await self._write(result, observed_at)
            for incident in [*opened, *result.changed]:
                self._open[incident.id] = incident
                self._unsaved.pop(incident.id, None)  # its row has its last sighting
            for incident in result.resolved:
                self._open.pop(incident.id, None)
                self._unsaved.pop(incident.id, None)
        self._committed()

    async def _write(self, result: Reconciled, observed_at: datetime) -> list[Incident]:
        """One transaction for what a snapshot changed; the incidents it opened."""
        now = self.clock()
        opened: list[Incident] = []
        async with self.store.write() as conn:
            for offence in result.opened:
                opened.append(await self._open_incident(conn, offence, observed_at, now))
            for incident in result.changed:
                await repository.save_processes(conn, incident)
                await repository.add_action(
                    conn, incident.id, now, "updated", detail=_pids_text(incident)
                )
            for incident in result.resolved:
                await self._write_resolved(conn, incident, now)
        return opened

    async def _open_incident(
        self, conn: AsyncConnection, offence: Offence, observed_at: datetime, now: datetime
    ) -> Incident:
        """Write a new incident for `offence`, with its event and its first step."""
        host = offence.host
        held = offence.holding
        index = (
            held.gpus[offence.gpu_uuid][1]
            if held is not None
            else self.gpu_indexes.get(offence.gpu_uuid)
        )
        incident = open_incident(
            str(uuid.uuid4()),
            offence,
            observed_at,
            mode=self.settings.mode,
            steps=self.settings.steps_for(host, self.labels_of(host)),
            gpu_index=index,
        )
        await repository.insert_incident(conn, incident)
        await repository.add_action(conn, incident.id, now, "opened", detail=_pids_text(incident))
        await add_event(conn, outbox, SOURCE, "violation.opened", incident.context())
        escalated = await self._escalate(conn, incident, now)
        log.info(
            "incident %s opened: %s on %s GPU %s reserved by %s",
            incident.id,
            incident.offender,
            incident.host,
            incident.gpu_index if incident.gpu_index is not None else "?",
            incident.owner or "nobody",
        )
        return escalated

    async def on_reservation(self, event_type: str, data: Mapping[str, Any]) -> None:
        async with self._lock:
            gone = self.book.apply(event_type, data)
            if gone is None:
                return
            reason = (
                RESOLVED_RESERVATION_ENDED
                if event_type == "reservation.ended"
                else RESOLVED_RESERVATION_CANCELLED
            )
            await self._resolve_reservations({gone.reservation_id}, reason)

    # -- time -------------------------------------------------------------------------------

    async def tick(self) -> None:
        """Take the steps that are due; resolve incidents whose reservation's end has passed."""
        now = self.clock()
        async with self._lock:
            ended = {held.reservation_id for held in self.book.ended(now)}
            if ended:
                await self._resolve_reservations(ended, RESOLVED_RESERVATION_ENDED)
            await self._save_last_seen(now)
            due = [i for i in self._open.values() if i.due_steps(now)]
            if not due:
                return
            escalated = []
            async with self.store.write() as conn:
                for incident in due:
                    escalated.append(await self._escalate(conn, incident, now))
            for incident in escalated:
                self._open[incident.id] = incident
        self._committed()

    def next_wake(self) -> datetime | None:
        times = [t for t in (i.next_due_at() for i in self._open.values()) if t is not None]
        return min(times, default=None)

    async def start(self, interval_s: float = 0.5) -> None:
        self._task = asyncio.create_task(self._run(interval_s), name="violations escalation")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        try:
            async with self._lock:
                await self._save_last_seen(None)
        except Exception as err:  # a lost lease or a dead database: the next leader sees less
            log.warning("last sightings of %d incidents not saved: %s", len(self._unsaved), err)

    async def _save_last_seen(self, now: datetime | None) -> None:
        """Write the sightings not written yet, in one transaction, at most once every
        `last_seen_every_s` (`now` None: at once). The caller holds the lock."""
        if not self._unsaved:
            return
        saved_at = self._last_seen_saved_at
        if now is not None and saved_at is not None and now - saved_at < self._last_seen_every:
            return
        async with self.store.write() as conn:
            await repository.save_last_seen(conn, self._unsaved)
        self._unsaved.clear()
        self._last_seen_saved_at = now or self.clock()

    def kick(self) -> None:
        self._wake.set()

    async def _run(self, interval_s: float) -> None:
        retrying = Retrying(log, "escalating incidents", first_wait_s=1.0)
        backoff_s = 0.0
        while True:
            wake = self.next_wake()
            wait_s = interval_s
            if wake is not None:
                wait_s = min(interval_s, max(0.0, (wake - self.clock()).total_seconds()))
            if retrying.failing:
                # An overdue step would make the wait 0: without this a dead database turns
                # the loop into a busy one.
                wait_s = backoff_s
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(wait_s):  # (3.11's wait_for can swallow a cancel)
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self.tick()
            except Exception as err:
                backoff_s = retrying.failed(err)
            else:
                retrying.succeeded()  # the due steps were taken in this tick

    # -- handlers' results ------------------------------------------------------------------

    async def record_actions(
        self, incident_id: str, step_index: int, handler: str, outcomes: Iterable[Mapping[str, Any]]
    ) -> int:
        now = self.clock()
        count = 0
        async with self.store.write() as conn:
            for outcome in outcomes:
                await repository.add_action(
                    conn,
                    incident_id,
                    now,
                    "action",
                    step_index=step_index,
                    handler=handler,
                    target=outcome["target"],
                    ok=None if outcome.get("skipped") else outcome["ok"],
                    detail=outcome.get("detail", ""),
                )
                count += 1
        return count

    # -- inside a transaction ---------------------------------------------------------------

    async def _escalate(
        self,
        conn: AsyncConnection,
        incident: Incident,
        now: datetime,
        due_by: datetime | None = None,
    ) -> Incident:
        """Take the steps due by `due_by` (default `now`), recorded at `now`."""
        due = incident.due_steps(due_by or now)
        for index in due:
            await repository.add_action(
                conn,
                incident.id,
                now,
                "escalated",
                step_index=index,
                handler=incident.steps[index].action,
                detail=incident.steps[index].text,
            )
            await add_event(conn, outbox, SOURCE, "violation.escalated", incident.escalation(index))
        return replace(incident, steps_done=incident.steps_done | set(due))

    async def _write_resolved(
        self, conn: AsyncConnection, incident: Incident, now: datetime
    ) -> None:
        assert incident.resolved_at is not None and incident.resolve_reason is not None
        # Steps that fell due while it was open and were not taken (the service was down, or
        # its tick had not come yet) still go out, once: their handlers mark them late.
        still_open = replace(incident, resolved_at=None, resolve_reason=None)
        await self._escalate(conn, still_open, now, due_by=_open_until(incident))
        await repository.save_resolved(conn, incident)
        await repository.add_action(
            conn, incident.id, now, "resolved", detail=incident.resolve_reason
        )
        await add_event(
            conn,
            outbox,
            SOURCE,
            "violation.resolved",
            {
                **incident.context(),
                "resolved_at": incident.resolved_at.isoformat(),
                "reason": incident.resolve_reason,
            },
        )

    async def _resolve_reservations(self, reservation_ids: set[int], reason: str) -> None:
        """Resolve the open incidents of these reservations (the caller holds the lock)."""
        affected = [i for i in self._open.values() if i.reservation_id in reservation_ids]
        if not affected:
            return
        now = self.clock()
        resolved = [replace(i, resolved_at=now, resolve_reason=reason) for i in affected]
        async with self.store.write() as conn:
            for incident in resolved:
                await self._write_resolved(conn, incident, now)
        for incident in resolved:
            self._open.pop(incident.id, None)
            self._unsaved.pop(incident.id, None)
        self._committed()

    def _committed(self) -> None:
        self.on_commit()
        self._wake.set()


def _open_until(incident: Incident) -> datetime:
    """The last moment a resolved incident is known to have been open."""
    assert incident.resolved_at is not None
    if incident.resolve_reason == RESOLVED_GONE:
        return incident.last_seen_at  # its processes went some time after
    if incident.resolve_reason == RESOLVED_RESERVATION_ENDED and incident.reservation_end:
        return min(incident.resolved_at, incident.reservation_end)
    return incident.resolved_at


def _pids_text(incident: Incident) -> str:
    return "pids " + ", ".join(f"{p.pid} ({p.command[:80]})" for p in incident.processes)
