"""How a task's run ended, told apart (pure: no I/O), so that the jobs service knows what to do
with the job: put it back in the queue by itself, or tell its owner at once.

- `INFRASTRUCTURE`: not the job's fault. A GPU it ran on failed (the monitor's
  `gpu.health_changed` with state "failed"), or its host was lost (it stopped answering, and
  when it answered again the task's process was gone without an exit status: the host
  restarted). A job that came from the queue goes back to it by itself.
- `EARLY`: the job failed on its own (a non-zero exit status, nobody stopped it, nothing
  failed under it) within its first `early_failure_s` seconds. Most failed jobs on shared
  clusters are such user errors (a typo, a missing file, out of memory at once): running it
  again would fail the same way, so it is not retried, and its owner is told at once with the
  exit status and the tail of its output.
- `LATE` (any other failure) and None (it did not fail) change nothing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

INFRASTRUCTURE = "infrastructure"
EARLY = "early"
LATE = "late"

# The lines of a task's output an early failure's notification carries.
TAIL_LINES = 20


@dataclass(frozen=True, slots=True)
class Ending:
    """One task's run as it ended (or is seen ending)."""

    status: str  # the task's status now: failed, stopped, succeeded ...
    previous_status: str  # before this poll: running, lost ...
    exit_code: int | None
    started_at: datetime | None
    ended_at: datetime | None
    stopped_by_warden: bool  # a stop was asked (by someone, a timer or a reservation)
    infrastructure: str | None = None  # why, when something under it failed (a GPU)


def classify(ending: Ending, early_failure_s: float) -> str | None:
    """INFRASTRUCTURE, EARLY, LATE, or None when the run did not fail."""
    if ending.infrastructure is not None:
        return INFRASTRUCTURE if ending.status in ("failed", "stopped") else None
    if ending.status != "failed" or ending.stopped_by_warden:
        return None
    if ending.exit_code is None:
        # Gone without an exit status: killed, or its host restarted. After the host was lost
        # that is the host's doing.
        return INFRASTRUCTURE if ending.previous_status == "lost" else LATE
    if ending.exit_code == 0:
        return None
    if (
        ending.started_at is not None
        and ending.ended_at is not None
        and ending.ended_at - ending.started_at < timedelta(seconds=early_failure_s)
    ):
        return EARLY
    return LATE


def host_lost_reason(host: str | None) -> str:
    return (
        f"its host {host} was lost: when it answered again the task's process was gone "
        "(the host restarted)"
    )


def gpu_failed_reason(host: str, index: int | None, uuid: str, reason: str | None) -> str:
    gpu = f"{host} GPU {index}" if index is not None else f"{host} GPU {uuid}"
    return f"{gpu} failed" + (f": {reason}" if reason else "")


def output_tail(log: str, lines: int = TAIL_LINES) -> str:
    """The last `lines` lines of a task's output."""
    kept: Sequence[str] = log.rstrip("\n").splitlines()[-lines:]
    return "\n".join(kept)


def early_failure_note(
    job_id: int, name: str, task: int, exit_code: int | None, ran_s: float, tail: str
) -> tuple[str, str]:
    """The title and text that tell an owner their job failed on its own, early."""
    title = f"Job {name} failed (exit status {exit_code})"
    text = (
        f"Your job {name} (#{job_id}) failed on its own after {ran_s:.0f} s: task {task} "
        f"exited with status {exit_code}. It was not retried (a job that fails in its first "
        "minutes most often has an error of its own).\n\n"
        + (f"The end of its output:\n{tail}" if tail else "It wrote no output.")
    )
    return title, text


def time_limit_note(job_id: int, name: str, limit_s: float, stopping: bool) -> tuple[str, str]:
    """The title and text that tell an owner their job ran past its time limit."""
    title = f"Job {name} ran past its time limit"
    then = (
        "It is being stopped now (on_time_limit = stop)."
        if stopping
        else "It goes on running (on_time_limit = tell); stop it yourself if it should end."
    )
    text = f"Your job {name} (#{job_id}) has run longer than its limit of {limit_s:.0f} s. {then}"
    return title, text
