"""The jobs service's working state, owned in one place: jobs and their tasks, what they wait
for, and their runs; the GPUs known and busy; the reservation book; and the one asyncio lock
that orders commands, event reactions and ticks. Only the leader replica has one
(services/shared/cluster/leadership.py): its writes are fenced, and a standby that takes over (or a
restart) reloads the jobs and goes on polling their tasks.

Every change is written with its events (through the outbox) in one transaction (`commit`),
then kept in memory. The engine, the job commands and the task supervisor each get this one
object; a method said to run "under the lock" expects `lock` held by its caller.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from services.jobs import repository
from services.jobs.domain import TASK_ENDED
from services.jobs.drains import DrainBook
from services.jobs.failures import INFRASTRUCTURE
from services.jobs.fair_queue import FairQueue
from services.jobs.state import JobState, TaskRun
from services.jobs.tables import outbox
from services.shared.cluster.host_directory import HostDirectory
from services.shared.config import Settings
from services.shared.errors import Forbidden, NotFound
from services.shared.gpu_labels import gpu_labels
from services.shared.reservation_book import ReservationBook
from services.shared.storage.outbox import add_event
from services.shared.storage.store import Store
from services.shared.topology import Topology

log = logging.getLogger("warden.jobs")

SOURCE = "jobs"
Clock = Callable[[], datetime]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class WorkingState:
    def __init__(
        self,
        store: Store,
        settings: Settings,
        *,
        on_commit: Callable[[], None] = lambda: None,
        clock: Clock = _utc_now,
        hosts: HostDirectory | None = None,
    ) -> None:
        self.store = store
        self.settings = settings.jobs
        # The inventory now (new work goes only there) and the last record of removed hosts
        # (tasks already running on one are still followed: `hosts.known`).
        self.hosts = hosts if hosts is not None else HostDirectory(settings.hosts)
        self.on_commit = on_commit
        self.clock = clock
        self.jobs: dict[int, JobState] = {}
        self.book = ReservationBook()
        self.book_loaded = False
        self.gpus: dict[str, tuple[str, int | None]] = {}  # uuid -> (host, index)
        self.gpu_labels: dict[str, tuple[str, ...]] = {}  # uuid -> its hardware labels
        self.busy: dict[str, frozenset[str]] = {}  # host -> GPUs with processes on them
        self.split: dict[str, str] = {}  # MIG instance uuid -> the GPU it splits (never placed)
        self.failed: dict[str, str] = {}  # uuid -> why that GPU failed (gpu.health_changed)
        self.avoid: dict[int, set[str]] = {}  # job id -> GPUs its owner may not use now
        # Each host's GPU interconnect (the monitor's host.topology_read): placement and the
        # CPU affinity hints; and [scheduling] packing.
        self.topologies: Mapping[str, Topology] = {}
        self.packing = settings.scheduling.packing
        self.drains = DrainBook()  # maintenance windows: the queue keeps out of them
        # The queue's order (fair share or FIFO), reasons and predicted starts.
        self.fair = FairQueue(settings.queue, timedelta(seconds=settings.jobs.queue_min_window_s))
        self.lock = asyncio.Lock()
        self._wake = asyncio.Event()

    async def load(self) -> None:
        async with self.store.read() as conn:
            for state in await repository.load_jobs(conn):
                self.jobs[state.id] = state
        if self.jobs:
            log.info("%d jobs reloaded", len(self.jobs))

    # -- asking for a tick --------------------------------------------------------------------

    def kick(self) -> None:
        """Ask the engine for a tick now: something may have freed or taken GPUs."""
        self._wake.set()

    async def wait_for_kick(self, timeout_s: float) -> None:
        """Until kicked or `timeout_s` passed; then ready for the next kick."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout_s):  # (3.11's wait_for can swallow a cancel)
                await self._wake.wait()
        self._wake.clear()

    # -- GPUs -----------------------------------------------------------------------------------

    def add_gpus(self, gpus: Iterable[Mapping[str, Any]]) -> None:
        """GPUs the reservations service listed; what a gpu.discovered event said stays."""
        for gpu in gpus:
            self.gpus.setdefault(gpu["uuid"], (gpu["host"], gpu.get("index")))
            if gpu["uuid"] not in self.gpu_labels:
                self.learn_labels(gpu)
            if gpu.get("mig_parent_uuid") and gpu.get("present", True):
                self.split.setdefault(gpu["uuid"], gpu["mig_parent_uuid"])
            if gpu.get("health") == "failed":  # (a restart: the health events came before)
                self.failed.setdefault(gpu["uuid"], gpu.get("health_reason") or "failed")

    def learn_labels(self, gpu: Mapping[str, Any]) -> None:
        """A GPU's hardware labels, from its name and memory (a gpu.discovered event or the
        reservations' list): what queued tasks' `labels` are matched against."""
        self.gpu_labels[gpu["uuid"]] = tuple(
            gpu_labels(gpu.get("name"), gpu.get("memory_total_mib"))
        )

    def hosts_gone(self, placement: Mapping[int, tuple[str, Sequence[str]]]) -> str | None:
        """Why a placement may not start: a host of it is not in the inventory now (removed
        since the job was defined); None when every host is there."""
        gone = sorted({host for host, _ in placement.values() if host not in self.hosts})
        if not gone:
            return None
        return f"{', '.join(gone)}: not in the inventory now (removed); no new work goes there"

    # -- who may ----------------------------------------------------------------------------

    def job(self, job_id: int) -> JobState:
        state = self.jobs.get(job_id)
        if state is None:
            raise NotFound(f"no job {job_id}", {"id": job_id})
        return state

    def owned(self, job_id: int, actor: str, admin: bool) -> JobState:
        state = self.job(job_id)
        if state.owner != actor and not admin:
            raise Forbidden(
                f"job {job_id} belongs to {state.owner}: only they or an admin may do this",
                {"id": job_id, "owner": state.owner},
            )
        return state

    # -- writing ------------------------------------------------------------------------------

    async def commit(
        self,
        state: JobState,
        *,
        task_changes: Sequence[tuple[int, str]] = (),
        runs: Sequence[int] = (),
        job_event: str | None = None,
        actor: str = "",
        changed: Sequence[str] = (),
    ) -> None:
        """Under the lock: derive the status, write the job with its events."""
        now = self.clock()
        previous = state.status
        for index, _ in task_changes:
            run = state.tasks[index]
            if run.status in TASK_ENDED and run.ended_at is None:
                run.ended_at = now
        async with self.store.write() as conn:
            for index in runs:
                await repository.record_run(conn, state, index)
            for index, before in task_changes:
                await add_event(
                    conn,
                    outbox,
                    SOURCE,
                    "task.status_changed",
                    {
                        "job_id": state.id,
                        "owner": state.owner,
                        "task": state.task_data(index),
                        "previous_status": before,
                        "at": now.isoformat(),
                    },
                )
            if self._requeue_if_preempted(state):
                job_event, actor, changed = "job.updated", "warden", ["queued"]
            state.status = state.derive_status()
            state.updated_at = now
            await repository.save_job(conn, state)
            if job_event is not None:
                data = {**state.event_data(), "actor": actor, "changed": list(changed)}
                await add_event(conn, outbox, SOURCE, job_event, data)
            if state.status != previous:
                await add_event(
                    conn,
                    outbox,
                    SOURCE,
                    "job.status_changed",
                    {**state.event_data(), "previous_status": previous},
                )
        self.on_commit()

    def _requeue_if_preempted(self, state: JobState) -> bool:
        """A queued job that yielded to a reservation, or whose GPU failed or host was lost,
        goes back to the queue once it ended (unless it or `requeue_on_preempt` says not to);
        it keeps its place (`enqueued_at`)."""
        if not (
            state.from_queue
            and requeue_wanted(state, self.settings.requeue_on_preempt)
            and state.stop_requested_at is None
            and not state.active
            and all(run.status in TASK_ENDED for run in state.tasks)
        ):
            return False
        state.tasks = [TaskRun(run=run.run) for run in state.tasks]
        state.queued = True
        state.from_queue = False
        state.stop_reason = None
        return True


def requeue_wanted(state: JobState, site_default: bool) -> bool:
    """Whether the job's last run ended for a reason that sends it back to the queue: it yielded
    to a reservation, or its GPU or host failed under it; and the job (or, where it says
    nothing, the site) wants that."""
    wanted = state.job.handback.requeue
    if not (site_default if wanted is None else wanted):
        return False
    yielded = bool(state.interrupted_for) and state.stop_reason is not None
    return yielded or state.failure == INFRASTRUCTURE
