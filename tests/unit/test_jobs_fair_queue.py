"""The queue's order, reasons and predicted starts as the jobs engine keeps them
(services/jobs/fair_queue.py): from jobs in memory to the answer of GET /queue."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from services.jobs.domain import Job, Task
from services.jobs.fair_queue import (
    FORECAST_COST_RATIO,
    FORECAST_GAP,
    FairQueue,
    past_runs,
    running_ends,
)
from services.jobs.queue.model import Demand, Gpu, QueuedJob, QueueState
from services.jobs.state import JobState, TaskRun
from services.shared.config.queue import QueueSettings

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
MIN = timedelta(minutes=1)


def state(
    job_id: int, owner: str, *, name: str = "train", gpus: int = 1, limit_h: float | None = None
) -> JobState:
    job = Job(job_id, owner, name, (Task(0, None, "python x.py", gpu_count=gpus),))
    return JobState(
        job,
        NOW - 10 * H,
        NOW - 10 * H,
        [TaskRun()],
        max_runtime_s=None if limit_h is None else limit_h * 3600,
    )


def ran(s: JobState, start: datetime, end: datetime | None, gpus: tuple[str, ...]) -> JobState:
    s.tasks = [
        TaskRun(
            status="succeeded" if end else "running",
            host="h",
            gpus=gpus,
            started_at=start,
            ended_at=end,
        )
    ]
    s.status = "succeeded" if end else "running"
    return s


def queued(s: JobState, at: datetime) -> JobState:
    s.queued, s.status, s.enqueued_at = True, "queued", at
    return s


def test_running_jobs_end_when_the_owners_earlier_runs_did() -> None:
    done = [
        ran(state(i, "ann"), NOW - 9 * H, NOW - 9 * H + m * MIN, ("h-0",))
        for i, m in ((1, 30), (2, 40), (3, 50))
    ]
    running = ran(state(4, "ann", limit_h=2), NOW - 10 * MIN, None, ("h-1",))
    other = ran(state(5, "bob", limit_h=2), NOW - H, None, ("h-2",))
    history = past_runs([*done, running, other])
    assert [r.duration for r in history] == [
        30 * MIN,
        40 * MIN,
        50 * MIN,
    ]
    ends = {r.job_id: r.end for r in running_ends([running, other], history, {}, NOW, H)}
    assert ends[4] == NOW + 30 * MIN  # started 10 min ago, ann's median 40 min
    assert ends[5] == NOW + H  # bob: no runs of his, his 2 h limit


def test_forecast_then_apply_then_the_answer() -> None:
    fair = FairQueue(QueueSettings(), H)
    jobs = {
        1: ran(state(1, "ann", limit_h=1), NOW - 30 * MIN, None, ("h-0",)),
        2: queued(state(2, "ann", limit_h=1), NOW - 20 * MIN),
        3: queued(state(3, "bob", limit_h=1), NOW - 10 * MIN),
    }
    jobs[2].waiting_reason = jobs[3].waiting_reason = "GPU h:0 is busy (job 1)"
    from services.jobs.engine import Engine  # noqa: F401 - the engine imports this module

    queue = [
        QueuedJob(s.id, s.owner, s.enqueued_at, (Demand(0, None, gpu_count=1),), H)
        for s in (jobs[2], jobs[3])
    ]
    order = fair.order(queue, jobs.values(), NOW)
    assert order == [3, 2]  # bob has no usage, ann half a GPU-hour
    snapshot = QueueState(NOW, {"h-0": Gpu("h-0", "h", 0, True)}, {}, queue, order=order)
    changed, compute = fair.forecast(snapshot, jobs, {})
    assert changed and compute is not None
    assert fair.forecast(snapshot, jobs, {}) == (False, None)  # one at a time, nothing new
    assert fair.apply(compute(), jobs)
    answer = fair.answer(jobs, NOW)
    assert [j["id"] for j in answer["jobs"]] == [3, 2]
    assert answer["jobs"][0]["predicted_start"] == (NOW + 30 * MIN).isoformat()
    # ann's: after bob's hour, stretched for what bob may queue meanwhile (1 GPU-hour a day of
    # the 1 GPU: 1/24 of it)
    assert answer["jobs"][1]["predicted_start"] == (NOW + 90 * MIN / (1 - 1 / 24)).isoformat()
    behind = "; behind 1 jobs of users with less usage for their share"
    assert answer["jobs"][1]["reason"] == "GPU h:0 is busy (job 1)" + behind
    assert jobs[3].event_data()["predicted_start"] == answer["jobs"][0]["predicted_start"]
    assert [u["user"] for u in answer["users"]] == ["bob", "ann"]
    # a change: a new forecast, but not sooner than FORECAST_GAP after the last
    free = {"h-0": Gpu("h-0", "h", 0, False)}
    soon = QueueState(NOW + timedelta(seconds=1), free, {}, queue, order=order)
    assert fair.forecast(soon, jobs, {})[1] is None
    later = QueueState(NOW + FORECAST_GAP, free, {}, queue, order=order)
    assert fair.forecast(later, jobs, {})[1] is not None
    # A forecast that took 4 s is not computed again for 5 times that, changes or not.
    fair.apply({}, jobs)
    fair.cost = 4 * timedelta(seconds=1)
    paced = FORECAST_COST_RATIO * fair.cost
    busy = {"h-0": Gpu("h-0", "h", 0, True)}
    assert paced > FORECAST_GAP
    early = QueueState(NOW + FORECAST_GAP + FORECAST_GAP, busy, {}, queue, order=order)
    assert fair.forecast(early, jobs, {})[1] is None
    paced_out = QueueState(NOW + FORECAST_GAP + paced, busy, {}, queue, order=order)
    assert fair.forecast(paced_out, jobs, {})[1] is not None
