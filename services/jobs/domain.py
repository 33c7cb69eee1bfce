"""Jobs and tasks as the pure parts (rendering, templates, scheduler) see them (no I/O).

A job has tasks; each task runs one command on one host, on zero or more GPUs. Parameters
and environment variables are either static (the job's, the same on every task) or per task
(the task's own, e.g. a rank). The job's status is derived from its tasks' statuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

# Declared once, with the events; re-exported for the pure parts.
from services.shared.contracts import JOB_STATUSES as JOB_STATUSES
from services.shared.contracts import TASK_STATUSES as TASK_STATUSES

# A task's life: pending -> starting -> running -> succeeded | failed | stopped; `lost` while
# its host does not answer (it may come back to running or end). A job is `scheduled` while it
# waits for its start time or its reservation, `queued` while it waits for free GPUs.
TASK_ENDED = frozenset({"succeeded", "failed", "stopped"})
TASK_ACTIVE = frozenset({"starting", "running", "lost"})

TEMPLATE_KINDS = ("torchrun", "tf_config", "tf_cluster_spec")
HANDBACK_SIGNALS = ("TERM", "USR1", "INT")  # what a queued job may ask for before it yields
TIME_LIMIT_ACTIONS = ("tell", "stop")
TF_ROLES = ("chief", "worker", "ps", "evaluator")


@dataclass(frozen=True)
class Param:
    """One command-line parameter: `--rank=0` (separator "="), `--rank 0` (" "), a flag
    without a value (`value` None), or a positional argument (`name` "")."""

    name: str
    value: str | None = None
    separator: str = " "  # " " or "="

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "value": self.value, "separator": self.separator}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Param:
        return cls(data["name"], data.get("value"), data.get("separator", " "))


@dataclass(frozen=True)
class Template:
    """A distributed-training template applied to every task of a job at start.

    kind torchrun: options `style` ("args": torchrun options before the task's command;
    "env": MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, LOCAL_RANK exported instead) and
    `nproc_per_node` (default: the number of the task's GPUs, at least 1).
    kind tf_config: TF_CONFIG exported; each task's role from `Task.role` (default worker).
    kind tf_cluster_spec: --ps_hosts, --worker_hosts, --job_name, --task_index parameters.
    """

    kind: str
    options: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Task:
    index: int  # position in its job, from 0
    host: str | None  # None: a queued task the scheduler places ("any N GPUs on one host")
    command: str  # shell code run as the owner (their own account), e.g. "python train.py"
    gpus: tuple[str, ...] = ()  # GPU uuids (resolved from indexes when the job is saved)
    gpu_count: int | None = None  # instead of `gpus`: any this many GPUs on one host
    labels: tuple[str, ...] = ()  # with gpu_count: only GPUs carrying these (gpu_labels)
    cwd: str = ""  # working directory on the host (empty: the owner's home)
    params: tuple[Param, ...] = ()  # this task's own parameters, after the job's
    env: Mapping[str, str] = field(default_factory=dict)  # this task's own variables
    role: str = "worker"  # for the TensorFlow templates: chief, worker, ps, evaluator


@dataclass(frozen=True)
class Handback:
    """How a job gives its GPUs back: the signal it gets `grace_s` before someone else's
    reservation of its GPUs starts (None: `[jobs] preempt_lead_s`), whether it then goes back
    to the queue (None: `[jobs] requeue_on_preempt`), and what happens when it runs past its
    time limit (`max_runtime_s`): its owner is told, and with "stop" it is stopped too."""

    signal: str = "TERM"
    grace_s: float | None = None
    requeue: bool | None = None
    on_time_limit: str = "tell"


@dataclass(frozen=True)
class Job:
    id: int
    owner: str
    name: str
    tasks: tuple[Task, ...]
    params: tuple[Param, ...] = ()  # static: on every task, before the task's own
    env: Mapping[str, str] = field(default_factory=dict)  # static: on every task
    template: Template | None = None
    description: str = ""
    # The owner says its tasks may share a GPU (else a GPU named by two tasks is refused).
    shared_gpus: bool = False
    handback: Handback = field(default_factory=Handback)


@dataclass(frozen=True)
class RenderedTask:
    """What a task runs: `command` is one line of sh code (every value quoted), `env` the
    variables exported before it (CUDA_VISIBLE_DEVICES included)."""

    index: int
    host: str
    command: str
    env: Mapping[str, str]
    gpus: tuple[str, ...]
    port: int | None = None  # the port a template took on `host`, if any


def job_status(
    task_statuses: Sequence[str], *, queued: bool, scheduled: bool, stopping: bool
) -> str:
    """A job's status from its tasks': the least advanced active state wins, then failures."""
    statuses = set(task_statuses)
    if not statuses or statuses == {"pending"}:
        if queued:
            return "queued"
        return "scheduled" if scheduled else "pending"
    if statuses & TASK_ACTIVE or "pending" in statuses:
        if stopping:
            return "stopping"
        if "lost" in statuses:
            return "lost"
        if "starting" in statuses or "pending" in statuses:
            return "starting"
        return "running"
    for final in ("failed", "stopped"):
        if final in statuses:
            return final
    return "succeeded"


@dataclass(frozen=True)
class Window:
    """When a queued job needs its GPUs: from now for `length`."""

    start: datetime
    length: timedelta

    @property
    def end(self) -> datetime:
        return self.start + self.length
