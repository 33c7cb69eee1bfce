"""Queued tasks that ask for any N GPUs carrying labels (`Demand.labels`): placement keeps to
the GPUs that carry them, the hold too, and a refusal names the labels."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

from services.jobs.queue.model import Decision, Demand, Gpu, QueuedJob, QueueState, Start, Waiting
from services.jobs.queue.scheduler import schedule
from services.shared.gpu_labels import gpu_labels

NOW = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
H = timedelta(hours=1)
A80 = tuple(gpu_labels("NVIDIA A100-SXM4-80GB", 81920))
A40 = tuple(gpu_labels("NVIDIA A100-SXM4-40GB", 40960))
H200 = tuple(gpu_labels("NVIDIA H200", 143771))


def fleet(**hosts: tuple[int, tuple[str, ...]]) -> dict[str, Gpu]:
    """GPUs "<host>-<index>" with the labels of their host's model: fleet(a=(4, A80))."""
    return {
        f"{host}-{i}": Gpu(f"{host}-{i}", host, i, False, labels)
        for host, (count, labels) in hosts.items()
        for i in range(count)
    }


def job(job_id: int, n: int, *labels: str, owner: str = "ann", enqueued: int = 0) -> QueuedJob:
    demand = Demand(0, None, gpu_count=n, labels=labels)
    return QueuedJob(job_id, owner, NOW - timedelta(minutes=1000 - enqueued), (demand,))


def starts(decisions: list[Decision]) -> dict[int, Start]:
    return {d.job_id: d for d in decisions if isinstance(d, Start)}


def waits(decisions: list[Decision]) -> dict[int, str]:
    return {d.job_id: d.reason for d in decisions if isinstance(d, Waiting)}


def test_any_n_with_labels_goes_only_to_gpus_carrying_them() -> None:
    gpus = fleet(a=(2, A40), b=(4, A80), c=(8, H200))
    decisions = schedule(QueueState(NOW, gpus, {}, [job(1, 2, "model=A100-80GB")]))
    # a's two GPUs would fit tighter, but they are A100-40GB.
    assert starts(decisions)[1].placement == {0: ("b", ("b-0", "b-1"))}
    decisions = schedule(QueueState(NOW, gpus, {}, [job(2, 2, "arch=ampere", "memory!=80GB")]))
    assert starts(decisions)[2].placement == {0: ("a", ("a-0", "a-1"))}


def test_labels_nobody_carries_and_too_few_labelled_gpus_are_said() -> None:
    gpus = fleet(a=(2, A40), b=(8, A80))
    queue = [job(1, 1, "arch=hopper"), job(2, 4, "model=A100-40GB")]
    reasons = waits(schedule(QueueState(NOW, gpus, {}, queue)))
    assert reasons[1] == "no GPU labelled arch=hopper is known"
    assert reasons[2] == "no host has 4 free GPUs for 1 h (labelled model=A100-40GB)"


def test_a_job_without_labels_may_use_any_gpu() -> None:
    gpus = fleet(a=(2, A40), b=(2, H200))
    queue = [job(1, 2, "arch=hopper"), job(2, 2, enqueued=1)]
    placed = starts(schedule(QueueState(NOW, gpus, {}, queue)))
    assert placed[1].placement == {0: ("b", ("b-0", "b-1"))}
    assert placed[2].placement == {0: ("a", ("a-0", "a-1"))}


def test_the_hold_keeps_only_gpus_carrying_the_labels() -> None:
    gpus = fleet(a=(4, A80), b=(4, H200))
    gpus = {u: replace(g, busy=True) if u in ("b-3",) else g for u, g in gpus.items()}
    queue = [job(1, 4, "arch=hopper"), job(2, 2, "arch=hopper", owner="bob", enqueued=1)]
    decisions = schedule(QueueState(NOW, gpus, {}, queue, hold_after=H))
    assert waits(decisions)[1] == (
        "no host has 4 free GPUs for 1 h (labelled arch=hopper) "
        "(waiting longest: 3 free GPUs kept for it)"
    )
    # b's free H200s are kept for job 1; the A100s of a are no use to job 2.
    assert 2 in waits(decisions)
