"""The simulated GPUs and the background jobs on them, as functions of time.

Everything follows from the seed, the time `t` and the draws made when the host was built:

- each GPU has two "lanes" of background jobs (`churn=True`): time is cut into slots per lane,
  and a hash of (seed, host, GPU, lane, slot) says whether a job runs in that slot, whose it
  is, when it starts and ends, its pid, command and memory. Some jobs span two GPUs (one pid
  on both, as data-parallel training does);
- utilisation follows the jobs on a GPU (ramping up after a job starts), temperature and
  power follow utilisation (cooling down after a job ends); figures the model does not report
  are None, printed `[N/A]` (fan speed on the data-centre GPUs).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from services.sim.mig import SimMig

USERS = ("alice", "bob", "carol", "dave", "erin", "frank", "grace", "heidi")
RAMP_S = 20.0  # a GPU reaches its working utilisation this fast after a job starts
COOL_S = 90.0  # and cools down this fast after the last one ends

_COMMANDS = (
    "python train.py --config configs/resnet50.yaml --batch-size 256",
    "/usr/bin/python3 -m torch.distributed.run --nproc_per_node=1 train_gpt.py --model gpt2-medium",
    "python3 finetune.py --model meta-llama/Llama-2-7b-hf --lr 2e-5 --epochs 3",
    "/opt/conda/bin/python -m ipykernel_launcher -f "
    "/home/{user}/.local/share/jupyter/runtime/kernel-{tag}.json",
    "python sweep.py --trial {tag} --lr 3e-4 --layers 12,24,48",
    "/home/{user}/venvs/diffusion/bin/python sample.py --steps 50 --out /scratch/{user}/{tag}",
    "/usr/bin/python3 /usr/local/bin/vllm serve mistralai/Mistral-7B-Instruct-v0.2 --port 8{port}",
    "./build/bin/nbody -benchmark -numbodies=1048576",
)


@dataclass(frozen=True)
class GpuModel:
    name: str
    memory_total_mib: int
    power_limit_w: float
    idle_power_w: float
    busy_power_w: float
    idle_temp_c: float
    busy_temp_c: float
    sm_clock_idle_mhz: int
    sm_clock_max_mhz: int
    mem_clock_idle_mhz: int
    mem_clock_max_mhz: int
    reports_fan: bool  # passively cooled data-centre boards report fan.speed as [N/A]
    idle_memory_used_mib: int


def _model(
    name: str,
    memory_mib: int,
    power: tuple[float, float, float],
    temps: tuple[float, float],
    sm: tuple[int, int],
    mem: tuple[int, int],
    reports_fan: bool,
) -> GpuModel:
    return GpuModel(
        name=name,
        memory_total_mib=memory_mib,
        power_limit_w=power[0],
        idle_power_w=power[1],
        busy_power_w=power[2],
        idle_temp_c=temps[0],
        busy_temp_c=temps[1],
        sm_clock_idle_mhz=sm[0],
        sm_clock_max_mhz=sm[1],
        mem_clock_idle_mhz=mem[0],
        mem_clock_max_mhz=mem[1],
        reports_fan=reports_fan,
        idle_memory_used_mib=4 if not reports_fan else 2,
    )


# name, memory.total, (power.limit, idle W, busy W), (idle, busy C), SM and memory clocks
GPU_MODELS: dict[str, GpuModel] = {
    m.name: m
    for m in (
        _model(
            "NVIDIA A100-SXM4-80GB",
            81920,
            (400.0, 58.0, 385.0),
            (31, 63),
            (210, 1410),
            (1593, 1593),
            reports_fan=False,
        ),
        _model(
            "NVIDIA H100 80GB HBM3",
            81559,
            (700.0, 71.0, 660.0),
            (30, 66),
            (345, 1980),
            (2619, 2619),
            reports_fan=False,
        ),
        _model(
            "NVIDIA RTX A6000",
            49140,
            (300.0, 21.0, 285.0),
            (36, 82),
            (210, 1800),
            (405, 8001),
            reports_fan=True,
        ),
    )
}
DEFAULT_GPU_MODEL = "NVIDIA A100-SXM4-80GB"


@dataclass(frozen=True)
class SimProcess:
    """One process using one or more GPUs (the same pid on each, as nvidia-smi lists it)."""

    pid: int
    user: str
    command: str
    gpus: tuple[int, ...]
    used_memory_mib: int | None  # per GPU; None: the driver reports [N/A]
    started_at: float
    ends_at: float | None = None  # background jobs end by themselves; scripted ones do not
    scripted: bool = False
    ignore_sigterm: bool = False  # SIGTERM leaves it running (SIGKILL does not)
    mig: int | None = None  # on a GPU split by MIG: the instance (MIG Dev) it was started on

    @property
    def process_name(self) -> str:
        """What nvidia-smi's `process_name` shows: the executable (argv[0])."""
        return self.command.split(" ", 1)[0]

    def to_dict(self) -> dict[str, Any]:
        return {
            "pid": self.pid,
            "user": self.user,
            "command": self.command,
            "gpus": list(self.gpus),
            "used_memory_mib": self.used_memory_mib,
            "started_at": self.started_at,
            "ends_at": self.ends_at,
            "scripted": self.scripted,
            "ignore_sigterm": self.ignore_sigterm,
            "mig": self.mig,
        }


@dataclass(slots=True)  # not frozen: built 8 times per probe, and frozen init is slow
class GpuMetrics:
    """What one GPU reports at one instant (None: not reported, [N/A])."""

    index: int
    uuid: str
    name: str
    utilization_gpu_percent: int
    utilization_memory_percent: int
    memory_used_mib: int
    memory_total_mib: int
    temperature_c: int
    power_draw_w: float
    power_limit_w: float
    fan_speed_percent: int | None
    clock_sm_mhz: int
    clock_memory_mhz: int


@dataclass
class SimGpu:
    index: int
    uuid: str
    model: GpuModel
    busy_lo: float
    busy_hi: float
    memory_ratio: float
    temp_offset: float
    wave: tuple[float, float, float, float]
    removed: bool = False
    last_stop: float | None = None  # a scripted or killed process left this GPU then
    mig: tuple[SimMig, ...] = ()  # split into MIG instances (services.sim.mig)
    fault: str = "ok"  # sim/gpu_faults.py: ok, lost, ecc, row_remap_pending, thermal, pcie


@dataclass
class Lane:
    """One lane of background jobs on a GPU; remembers the job of the slot last asked for."""

    host_key: str  # `seed/host`: with the GPU, lane and slot, it seeds each slot's draw
    pid_max: int
    gpu: int
    number: int
    period_s: float
    origin: float
    busy_probability: float
    memory_range_mib: tuple[int, int]
    multi_gpu_probability: float
    slot: int | None = None
    job: SimProcess | None = None

    def job_at(self, t: float) -> SimProcess | None:
        """The job of the slot `t` falls in (it may not have started or may have ended)."""
        slot = math.floor((t - self.origin) / self.period_s)
        if slot == self.slot:
            return self.job
        rng = random.Random(f"{self.host_key}/{self.gpu}/{self.number}/{slot}")
        job = None
        if rng.random() < self.busy_probability:
            slot_start = self.origin + slot * self.period_s
            offset = rng.uniform(0.0, 0.3) * self.period_s
            duration = rng.uniform(0.3, 1.0) * (self.period_s - offset)
            user = rng.choice(USERS)
            tag = f"{rng.getrandbits(32):08x}"
            command = rng.choice(_COMMANDS).format(user=user, tag=tag, port=rng.randrange(100))
            gpus: tuple[int, ...] = (self.gpu,)
            if rng.random() < self.multi_gpu_probability:
                gpus = (self.gpu, self.gpu + 1)
            job = SimProcess(
                pid=rng.randrange(1000, self.pid_max),
                user=user,
                command=command,
                gpus=gpus,
                used_memory_mib=rng.randrange(*self.memory_range_mib),
                started_at=slot_start + offset,
                ends_at=slot_start + offset + duration,
            )
        self.slot, self.job = slot, job
        return job


def make_gpu(rng: random.Random, index: int, model: GpuModel) -> SimGpu:
    lo = rng.uniform(35.0, 80.0)
    return SimGpu(
        index=index,
        uuid=_uuid(rng),
        model=model,
        busy_lo=lo,
        busy_hi=rng.uniform(max(lo, 88.0), 100.0),
        memory_ratio=rng.uniform(0.25, 0.7),
        temp_offset=rng.uniform(-2.0, 3.0),
        wave=(
            rng.uniform(0.02, 0.08),
            rng.uniform(0, math.tau),
            rng.uniform(0.1, 0.4),
            rng.uniform(0, math.tau),
        ),
    )


def make_lanes(
    rng: random.Random,
    gpu: SimGpu,
    gpu_count: int,
    *,
    host_key: str,
    churn_period_s: float,
    pid_max: int,
    start: float,
) -> list[Lane]:
    """The two lanes of `gpu`: a busy one of large jobs (some spanning the next GPU) and a
    quieter one of small jobs."""
    scale = gpu.model.memory_total_mib / 81920
    lanes = []
    for lane_no, (p_busy, mem, multi) in enumerate(
        ((0.7, (8000, 60000), 0.12), (0.25, (1000, 16000), 0.0))
    ):
        period = churn_period_s * rng.uniform(0.5, 1.5)
        lanes.append(
            Lane(
                host_key=host_key,
                pid_max=pid_max,
                gpu=gpu.index,
                number=lane_no,
                period_s=period,
                origin=start - rng.uniform(0.0, period),
                busy_probability=p_busy,
                memory_range_mib=(int(mem[0] * scale), int(mem[1] * scale)),
                multi_gpu_probability=multi if gpu.index + 1 < gpu_count else 0.0,
            )
        )
    return lanes


def gpu_metrics(
    gpu: SimGpu, t: float, procs: Sequence[SimProcess], last_end: float | None
) -> GpuMetrics:
    """What `gpu` reports at `t` with `procs` on it, the last process having left at `last_end`
    (None: never)."""
    model = gpu.model
    wave = _wave(t, gpu.wave)
    heat = 0.0
    util = 0
    if procs:
        first = min(p.started_at for p in procs)
        heat = 1.0 - math.exp(-max(0.0, t - first) / RAMP_S)
        level = gpu.busy_lo + (gpu.busy_hi - gpu.busy_lo) * (0.5 + 0.5 * wave)
        util = max(1, min(100, round(level * heat)))
    if last_end is not None:
        heat = max(heat, math.exp(-(t - last_end) / COOL_S))
    used = model.idle_memory_used_mib + sum(p.used_memory_mib or 0 for p in procs)
    temp = (
        model.idle_temp_c
        + (model.busy_temp_c - model.idle_temp_c) * heat * (0.8 + 0.2 * wave)
        + gpu.temp_offset
        + 0.6 * math.sin(gpu.wave[2] * t)
    )
    power = model.idle_power_w + (model.busy_power_w - model.idle_power_w) * (util / 100.0) * (
        0.9 + 0.1 * wave
    )
    power += 0.8 * math.sin(gpu.wave[0] * 7.0 * t + gpu.wave[3])
    fan = None
    if model.reports_fan:
        fan = max(30, min(100, round(30 + (temp - model.idle_temp_c) * 1.4)))
    if util:
        clock_sm = model.sm_clock_max_mhz - 15 * round(2 * (0.5 + 0.5 * wave))
        clock_mem = model.mem_clock_max_mhz
    else:
        clock_sm, clock_mem = model.sm_clock_idle_mhz, model.mem_clock_idle_mhz
    return GpuMetrics(
        index=gpu.index,
        uuid=gpu.uuid,
        name=model.name,
        utilization_gpu_percent=util,
        utilization_memory_percent=round(util * gpu.memory_ratio),
        memory_used_mib=min(model.memory_total_mib, used),
        memory_total_mib=model.memory_total_mib,
        temperature_c=round(temp),
        power_draw_w=round(min(model.power_limit_w, max(1.0, power)), 2),
        power_limit_w=model.power_limit_w,
        fan_speed_percent=fan,
        clock_sm_mhz=clock_sm,
        clock_memory_mhz=clock_mem,
    )


def _wave(t: float, w: tuple[float, float, float, float]) -> float:
    """A smooth value in [-1, 1]."""
    return 0.6 * math.sin(w[0] * t + w[1]) + 0.4 * math.sin(w[2] * t + w[3])


def _uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"GPU-{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
