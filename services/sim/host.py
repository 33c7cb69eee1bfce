"""One simulated host: its state (GPUs and their background-job lanes, scripted processes,
terminal sessions, job tasks, scripted faults) and the processes running on it at a time `t`.

Its CPU, memory and pid counters are drawn once from the seed (`probe_output` prints them).
Processes started by the scripting API or by a job task are "scripted"; the background jobs
come from the lanes (`services.sim.gpus`) while `churn` is on.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from services.sim.gpus import GpuModel, Lane, SimGpu, SimProcess, gpu_metrics, make_gpu, make_lanes

NVIDIA_SMI_MODES = ("ok", "missing", "failing", "no_devices")
NvidiaSmiMode = Literal["ok", "missing", "failing", "no_devices"]
TaskState = Literal["running", "exited", "gone"]


@dataclass
class TerminalSession:
    """One login with a terminal (`who` lists it) and what was written to that terminal."""

    user: str
    tty: str
    login_at: float
    messages: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tty": self.tty,
            "user": self.user,
            "login_at": self.login_at,
            "messages": list(self.messages),
        }


@dataclass
class SimTask:
    """One job task START began as `user` (see `services.sim.job_scripts`). It ends by itself at
    `ends_at` with `natural_exit`, or when signalled (`ended_at`, `exit_code`: None when
    killed)."""

    user: str
    session: str
    multiplexer: str
    cwd: str
    command: str
    env: dict[str, str]
    pid: int  # the task's runner shell (what STATUS reports)
    started_at: float
    gpus: tuple[int, ...]
    gpu_pid: int | None  # its process on `gpus`
    ends_at: float | None
    natural_exit: int
    ignores: frozenset[str]  # signals the command ignores (`trap '' INT`)
    ended_at: float | None = None
    exit_code: int | None = None
    # Signals the command handles (`trap 'save; exit 0' USR1`): it ends with this status.
    handlers: Mapping[str, int] = field(default_factory=dict)
    caught: str | None = None  # the handled signal that ended it

    def state(self, t: float) -> tuple[TaskState, int | None]:
        """(running | exited | gone, exit status) at `t`."""
        if self.ended_at is not None and self.ended_at <= t:
            return ("gone", None) if self.exit_code is None else ("exited", self.exit_code)
        if self.ends_at is not None and self.ends_at <= t:
            return "exited", self.natural_exit
        return "running", None

    def to_dict(self, t: float) -> dict[str, Any]:
        state, code = self.state(t)
        return {
            "user": self.user,
            "session": self.session,
            "multiplexer": self.multiplexer,
            "cwd": self.cwd,
            "command": self.command,
            "env": dict(self.env),
            "pid": self.pid,
            "started_at": self.started_at,
            "gpus": list(self.gpus),
            "gpu_pid": self.gpu_pid,
            "state": state,
            "exit_code": code,
            "caught": self.caught,
        }


@dataclass
class SimHost:
    name: str
    number: int
    seed: int
    churn: bool  # background jobs run on the lanes
    pid_max: int
    cores: int
    memory_total_kb: int
    boot_time: float
    cpu_base: float
    cpu_amp: float
    cpu_w: float
    cpu_phi: float
    pid_origin: int
    gpus: list[SimGpu]
    lanes: list[Lane]
    next_pid: int
    scripted: dict[int, SimProcess] = field(default_factory=dict)
    killed: set[tuple[int, float]] = field(default_factory=set)  # (pid, started_at)
    sessions: dict[str, TerminalSession] = field(default_factory=dict)  # by tty
    tasks: dict[tuple[str, str], SimTask] = field(default_factory=dict)  # by (user, session)
    down: bool = False
    hang_s: float | None = None  # math.inf: never answers
    nvidia_smi: NvidiaSmiMode = "ok"
    topology: str | None = None  # a shape of services.shared.topology_shapes; None: pcie

    def processes(self, t: float) -> list[SimProcess]:
        """Processes running at `t`, scripted first, then background jobs by GPU."""
        running = [
            p
            for p in self.scripted.values()
            if p.started_at <= t and (p.ends_at is None or t < p.ends_at)
        ]
        if self.churn:
            for lane in self.lanes:
                job = lane.job_at(t)
                if (
                    job is not None
                    and job.started_at <= t
                    and job.ends_at is not None
                    and t < job.ends_at
                    and (job.pid, job.started_at) not in self.killed
                ):
                    running.append(job)
        return running

    def by_gpu(self, t: float) -> tuple[dict[int, list[SimProcess]], dict[int, float | None]]:
        """Running processes by GPU, and when each GPU last saw a process end (None: never)."""
        by_gpu: dict[int, list[SimProcess]] = {g.index: [] for g in self.gpus}
        for proc in self.processes(t):
            for index in proc.gpus:
                by_gpu[index].append(proc)
        for procs in by_gpu.values():
            if len(procs) > 1:
                procs.sort(key=lambda p: (p.started_at, p.pid))
        ends: dict[int, float | None] = {
            g.index: g.last_stop if g.last_stop is not None and g.last_stop <= t else None
            for g in self.gpus
        }
        for proc in self.scripted.values():  # tasks that ended by themselves
            if proc.ends_at is not None and proc.started_at <= proc.ends_at <= t:
                _ended_at(ends, proc.gpus, proc.ends_at)
        if self.churn:  # processes() brought each lane's job up to `t`
            for lane in self.lanes:
                job = lane.job
                if job is not None and job.ends_at is not None and job.ends_at <= t:
                    _ended_at(ends, job.gpus, job.ends_at)
        return by_gpu, ends

    def taken_pids(self, t: float) -> set[int]:
        taken = {p.pid for p in self.processes(t)} | set(self.scripted)
        return taken | {task.pid for task in self.tasks.values()}

    def free_pid(self, t: float, also: Iterable[int] = ()) -> int:
        """The next free pid (as the kernel hands them out: upwards, then wrapping), not one of
        `also` either."""
        taken = self.taken_pids(t) | set(also)
        while self.next_pid in taken or self.next_pid >= self.pid_max:
            self.next_pid = 300 if self.next_pid >= self.pid_max else self.next_pid + 1
        pid = self.next_pid
        self.next_pid += 1 + pid % 13
        return pid

    def snapshot(self, t: float) -> dict[str, Any]:
        """The host at `t` as plain JSON-ready data."""
        by_gpu, ends = self.by_gpu(t)
        procs = {p.pid: p for p in self.processes(t)}
        hang: float | str | None = self.hang_s
        if hang == math.inf:
            hang = "forever"
        return {
            "name": self.name,
            "down": self.down,
            "hang_s": hang,
            "nvidia_smi": self.nvidia_smi,
            "topology": self.topology or "pcie",
            "cores": self.cores,
            "memory_total_kb": self.memory_total_kb,
            "gpus": [
                {
                    **asdict(gpu_metrics(g, t, by_gpu[g.index], ends[g.index])),
                    "removed": g.removed,
                    "mig": [asdict(m) for m in g.mig],
                    "fault": g.fault,
                }
                for g in self.gpus
            ],
            "processes": [
                {
                    **procs[pid].to_dict(),
                    "gpu_uuids": [self.gpus[i].uuid for i in procs[pid].gpus],
                }
                for pid in sorted(procs)
            ],
        }


def make_host(
    name: str,
    number: int,
    gpu_count: int,
    model: GpuModel,
    start: float,
    *,
    seed: int,
    churn: bool,
    churn_period_s: float,
    pid_max: int,
) -> SimHost:
    """Host `name` as `seed` draws it, booted some time before `start`."""
    host_key = f"{seed}/{name}"
    rng = random.Random(host_key)
    gpus = []
    lanes = []
    for index in range(gpu_count):
        gpu = make_gpu(rng, index, model)
        gpus.append(gpu)
        lanes += make_lanes(
            rng,
            gpu,
            gpu_count,
            host_key=host_key,
            churn_period_s=churn_period_s,
            pid_max=pid_max,
            start=start,
        )
    return SimHost(
        name=name,
        number=number,
        seed=seed,
        churn=churn,
        pid_max=pid_max,
        cores=rng.choice((32, 64, 96, 128)),
        memory_total_kb=rng.choice((263847184, 527952152, 1056538036, 2113060436)),
        boot_time=start - rng.uniform(3600.0, 60 * 86400.0),
        cpu_base=rng.uniform(0.1, 0.45),
        cpu_amp=rng.uniform(0.02, 0.08),
        cpu_w=rng.uniform(0.005, 0.03),
        cpu_phi=rng.uniform(0, math.tau),
        pid_origin=rng.randrange(300, pid_max // 2),
        gpus=gpus,
        lanes=lanes,
        next_pid=rng.randrange(pid_max // 2, pid_max * 3 // 4),
    )


def _ended_at(ends: dict[int, float | None], gpus: Iterable[int], at: float) -> None:
    """`at` is when a process ended on each of `gpus`: keep the latest end of each."""
    for index in gpus:
        end = ends[index]
        ends[index] = at if end is None else max(end, at)
