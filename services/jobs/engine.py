"""The jobs service's engine: the tick over the `WorkingState`, and what other services report
to it (GPUs and processes the monitor saw, reservation changes).

A tick (every `poll_interval_s`, and at once after a kick: an event or command that may free or
take GPUs): has the task supervisor poll the running tasks and escalate stops, starts jobs
whose time or reservation came, stops jobs whose stop time or reservation end came, and runs
one pass of the queue scheduler (a pure function: `scheduler.schedule`), whose decisions it
applies.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from services.jobs.aftercare import Aftercare
from services.jobs.fair_queue import (
    forecast_queue,
    publish_queue,
    refresh_groups,
    start_forecast,
)
from services.jobs.queue.model import (
    Booking,
    Demand,
    Gpu,
    Interrupt,
    Kill,
    QueuedJob,
    QueueState,
    RunningJob,
    Start,
    Waiting,
)
from services.jobs.queue.scheduler import schedule
from services.jobs.start_checks import fixed_placement, run_until, use_refusals
from services.jobs.state import JobState
from services.jobs.supervisor import TaskSupervisor
from services.jobs.working_state import WorkingState
from services.reservations import api as reservations_api
from services.shared.bus import Bus
from services.shared.cluster.background import cancel_and_wait
from services.shared.errors import WardenError
from services.shared.failures import Retrying

log = logging.getLogger("warden.jobs")

# How often the GPUs are listed again while a host of the inventory has none known.
GPU_RELIST = timedelta(seconds=30)


class Engine:
    def __init__(self, working: WorkingState, supervisor: TaskSupervisor, bus: Bus) -> None:
        self.working = working
        self.supervisor = supervisor
        self.bus = bus
        self.aftercare = Aftercare(working, supervisor, bus)
        self._loop: asyncio.Task[None] | None = None
        self._listed_at: datetime | None = None  # the last time GPUs were listed again

    # -- start-up and shutdown ----------------------------------------------------------------

    async def load_reservations(
        self, reservations: Iterable[Mapping[str, Any]], gpus: Iterable[Mapping[str, Any]]
    ) -> None:
        """What the reservations service answered at start-up (events may have come first)."""
        async with self.working.lock:
            self.working.book.load(reservations)
            self.working.add_gpus(gpus)
            self.working.book_loaded = True
        self.working.kick()

    async def start(self) -> None:
        self._loop = asyncio.create_task(self._run(), name="jobs engine")

    async def stop(self) -> None:
        await cancel_and_wait(self._loop)
        await cancel_and_wait(self.working.fair.task)

    async def _run(self) -> None:
        retrying = Retrying(log, "the jobs tick")
        wait_s = self.working.settings.poll_interval_s
        while True:
            await self.working.wait_for_kick(wait_s)
            try:
                await self.tick()
            except Exception as err:
                wait_s = max(self.working.settings.poll_interval_s, retrying.failed(err))
            else:
                retrying.succeeded()
                wait_s = self.working.settings.poll_interval_s

    # -- events -----------------------------------------------------------------------------

    def on_gpu_discovered(self, data: Mapping[str, Any]) -> None:
        self.working.gpus[data["uuid"]] = (data["host"], data.get("index"))
        self.working.learn_labels(data)
        if data.get("mig_parent_uuid"):  # a GPU split by MIG takes work on its instances only
            self.working.split[data["uuid"]] = data["mig_parent_uuid"]

    async def on_gpu_health(self, data: Mapping[str, Any]) -> None:
        """A failed GPU is never placed on (one that heals is placed on again), and the jobs
        running on it are requeued when they end (`aftercare.py`)."""
        if data["state"] == "failed":
            self.working.failed[data["uuid"]] = data.get("reason") or "failed"
        elif self.working.failed.pop(data["uuid"], None) is not None:
            self.working.kick()
        await self.aftercare.on_gpu_health(data)

    def on_processes(self, data: Mapping[str, Any]) -> None:
        busy = frozenset(p["gpu_uuid"] for p in data["processes"])
        if self.working.busy.get(data["host"]) != busy:
            self.working.busy[data["host"]] = busy
            self.working.kick()

    async def load_maintenance(self, windows: Iterable[Mapping[str, Any]]) -> None:
        async with self.working.lock:
            self.working.drains.load(windows)
        self.working.kick()

    async def on_maintenance(self, event_type: str, data: Mapping[str, Any]) -> None:
        async with self.working.lock:
            self.working.drains.apply(event_type, data)
        self.working.kick()

    async def on_reservation(self, event_type: str, data: Mapping[str, Any]) -> None:
        async with self.working.lock:
            self.working.book.apply(event_type, data)
        self.working.kick()

    # -- the tick -----------------------------------------------------------------------------

    async def tick(self) -> None:
        self.supervisor.poll_tasks()
        async with self.working.lock:
            now = self.working.clock()
            await self.supervisor.escalate_stops(now)
            await self.aftercare.time_limits(now)
            launches = await self._timers(now)
            await self._drain_stops(now)
        for state, placement in launches:
            await self._launch_checked(state, placement, from_queue=False)
        await refresh_groups(self.bus, self.working)
        await self._learn_unknown_gpus(now)
        await self._queue_pass()

    async def _learn_unknown_gpus(self, now: datetime) -> None:
        """GPUs this service may never have heard of (their gpu.discovered went out before it
        listened, and the reservations' list at its start was read before they were in it):
        asked of the reservations service again, at most every GPU_RELIST while a host has
        none known or a queued job waits."""
        known = {host for host, _ in self.working.gpus.values()}
        waiting = any(s.queued and s.waiting_reason for s in self.working.jobs.values())
        if not waiting and all(host in known for host in self.working.hosts):
            return
        if self._listed_at is not None and now - self._listed_at < GPU_RELIST:
            return
        self._listed_at = now
        try:
            gpus = await reservations_api.LIST_GPUS.call(self.bus)
        except WardenError as err:
            log.debug("listing the GPUs failed: %s", err.message)
            return
        async with self.working.lock:
            self.working.add_gpus(gpus)
        self.working.kick()

    async def _drain_stops(self, now: datetime) -> None:
        """Stop the running jobs on GPUs drained now by a window that asked for it (under the
        lock); others are left alone."""
        stopping = self.working.drains.stopping(self.working.gpus, now)
        if not stopping:
            return
        for state in list(self.working.jobs.values()):
            if not state.active or state.stop_reason is not None:
                continue
            why = next(
                (
                    stopping[g]
                    for run in state.tasks
                    if run.active
                    for g in run.gpus
                    if g in stopping
                ),
                None,
            )
            if why is not None:
                await self.supervisor.request_stop(state, why)

    async def _timers(self, now: datetime) -> list[tuple[JobState, dict[int, Any]]]:  # noqa: C901 - one pass over the timers: stops, warnings and launches together
        """Stop jobs whose time is up; the scheduled jobs whose start came (to launch)."""
        lead = timedelta(seconds=self.working.settings.reservation_stop_lead_s)
        launches = []
        for state in list(self.working.jobs.values()):
            held = self.working.book.get(state.reservation_id) if state.reservation_id else None
            if state.active:
                if state.stop_reason is not None:
                    continue
                if state.stop_at is not None and now >= state.stop_at:
                    await self.supervisor.request_stop(state, "its stop time came")
                elif state.reservation_id is not None and self.working.book_loaded:
                    if held is None:
                        await self.supervisor.request_stop(
                            state, f"reservation {state.reservation_id} was cancelled or ended"
                        )
                    elif now >= held.end - lead:
                        await self.supervisor.request_stop(
                            state, f"reservation {state.reservation_id} ends at {held.end}"
                        )
                continue
            if state.status != "scheduled":
                continue
            if state.start_at is not None and now >= state.start_at:
                launches.append(state)
            elif state.reservation_id is not None and self.working.book_loaded:
                if held is None or now >= held.end - lead:
                    await self._fail_waiting(
                        state,
                        f"reservation {state.reservation_id} was cancelled or ended "
                        "before the job could start",
                    )
                elif held.start <= now:
                    launches.append(state)
        return [(state, fixed_placement(state)) for state in launches]

    async def _fail_waiting(self, state: JobState, reason: str) -> None:
        changes = []
        for index, run in enumerate(state.tasks):
            if run.status == "pending":
                run.status, run.reason = "failed", reason
                changes.append((index, "pending"))
        state.start_at = None
        state.reservation_id = None
        await self.working.commit(state, task_changes=changes, runs=[i for i, _ in changes])

    async def _launch_checked(
        self,
        state: JobState,
        placement: Mapping[int, tuple[str, tuple[str, ...]]],
        *,
        from_queue: bool,
    ) -> bool:
        """Launch after asking whether the owner may use the GPUs now; False if refused."""
        gone = self.working.hosts_gone(placement)
        if gone is not None:
            async with self.working.lock:
                if from_queue:
                    state.waiting_reason = gone
                elif not state.active and self.working.jobs.get(state.id) is state:
                    await self._fail_waiting(state, f"not started: {gone}")
            return False
        now = self.working.clock()
        until = run_until(state, now)
        if from_queue:
            until = max(until, now + state.window(self._min_window))
        gpus = [g for _, on in placement.values() for g in on]
        try:
            reasons = await use_refusals(self.bus, state.owner, gpus, now, until)
        except WardenError as err:
            log.warning("job %d not started: %s", state.id, err.message)
            return False
        async with self.working.lock:
            if state.active or self.working.jobs.get(state.id) is not state:
                return False
            if reasons:
                message = "; ".join(str(r.get("message")) for r in reasons[:3])
                if from_queue:
                    refused = {str(r["gpu"]) for r in reasons if r.get("gpu")}
                    self.working.avoid.setdefault(state.id, set()).update(refused or gpus)
                    state.waiting_reason = message
                    return False
                await self._fail_waiting(state, f"not started: {message}")
                return False
            starting = await self.supervisor.mark_starting(state, placement, from_queue=from_queue)
        self.supervisor.start_in_background(state, starting)
        return True

    @property
    def _min_window(self) -> timedelta:
        return timedelta(seconds=self.working.settings.queue_min_window_s)

    # -- the queue ------------------------------------------------------------------------------

    def queue_state(self, now: datetime) -> QueueState:
        jobs, settings = self.working.jobs, self.working.settings
        held = {g for s in jobs.values() for run in s.tasks if run.active for g in run.gpus}
        busy = {g for on_host in self.working.busy.values() for g in on_host} | held
        busy |= set(self.working.split.values())
        gpus = {
            uuid: Gpu(
                uuid,
                host,
                index,
                uuid in busy,
                self.working.gpu_labels.get(uuid, ()),
                self.working.failed.get(uuid),
            )
            for uuid, (host, index) in self.working.gpus.items()
            if host in self.working.hosts  # not a removed host's: no new work goes there
        }
        bookings = {
            uuid: [
                Booking(h.reservation_id, h.owner, h.guests, h.start, h.end)
                for h in self.working.book.on_gpu(uuid)
            ]
            for uuid in gpus
        }
        queue = [
            QueuedJob(
                job_id=s.id,
                owner=s.owner,
                enqueued_at=s.enqueued_at or s.created_at,
                demands=tuple(
                    Demand(t.index, t.host, t.gpus, t.gpu_count, labels=t.labels)
                    for t in s.job.tasks
                ),
                max_runtime=None if s.max_runtime_s is None else timedelta(seconds=s.max_runtime_s),
            )
            for s in jobs.values()
            if s.queued and s.status == "queued"
        ]
        running = [
            RunningJob(
                job_id=s.id,
                owner=s.owner,
                gpus=frozenset(g for run in s.tasks if run.active for g in run.gpus),
                preemptible=True,
                interrupted_for=frozenset(s.interrupted_for),
                lead=_grace(s),
            )
            for s in jobs.values()
            if s.active and s.from_queue
        ]
        self.working.fair.note_reservations(self.working.book.all(), now)
        return QueueState(
            now=now,
            gpus=gpus,
            bookings=bookings,
            queue=queue,
            running=running,
            min_window=self._min_window,
            preempt_lead=timedelta(seconds=settings.preempt_lead_s),
            avoid={job_id: frozenset(gpus) for job_id, gpus in self.working.avoid.items()},
            hold_after=timedelta(seconds=settings.queue_hold_after_s)
            if settings.queue_hold_after_s
            else None,
            topologies=self.working.topologies,
            packing=self.working.packing,
            drained=self.working.drains.by_gpu(self.working.gpus, now),
            order=self.working.fair.order(queue, jobs.values(), now),
        )

    async def _queue_pass(self) -> None:
        async with self.working.lock:
            jobs = self.working.jobs
            if not any(s.queued or (s.active and s.from_queue) for s in jobs.values()):
                return
            queue_state = self.queue_state(self.working.clock())
            decisions = schedule(queue_state)
            starts = []
            for decision in decisions:
                state = jobs.get(decision.job_id)
                if state is None:
                    continue
                if isinstance(decision, Interrupt | Kill):
                    await self._yield(state, decision)
                elif isinstance(decision, Waiting):
                    state.waiting_reason = decision.reason
                elif isinstance(decision, Start):
                    starts.append((state, decision.placement))
            changed, compute = forecast_queue(self.working, queue_state)
        for state, placement in starts:
            await self._launch_checked(state, placement, from_queue=True)
        await publish_queue(self.bus, self.working, changed)
        start_forecast(self.bus, self.working, compute)

    async def _yield(self, state: JobState, decision: Interrupt | Kill) -> None:
        """Under the lock: a queued job makes way for a reservation: its hand-back signal
        within its grace (Interrupt), SIGKILL at the reservation's start (Kill); the first of
        a run counts as one interruption."""
        state.interrupted_for.add(decision.reservation_id)
        if state.stop_reason is None:
            state.interruptions += 1
            state.stop_reason = f"yields to reservation {decision.reservation_id}"
            if isinstance(decision, Interrupt):
                state.stop_reason += f", which starts at {decision.reservation_start.isoformat()}"
        await self.working.commit(state)
        if isinstance(decision, Interrupt):
            self.supervisor.signal(state, state.job.handback.signal)
        else:
            self.supervisor.signal(state, "KILL")


def _grace(state: JobState) -> timedelta | None:
    """The job's own hand-back grace (None: the site's `preempt_lead_s`)."""
    grace = state.job.handback.grace_s
    return None if grace is None else timedelta(seconds=grace)
