"""Reading this machine's GPUs through NVML (the official `nvidia-ml-py` bindings, no subprocess).

`read_gpus(nvml)` takes the `pynvml` module (or `FakeNvml`, beside it, in tests) and returns
the GPUs and their compute processes. A figure a GPU does not support is None, never 0. No
NVML library, or no driver, means "no GPU" for this host, not an error. NVML calls block, so
the caller runs this in a thread.
"""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import ModuleType
from typing import Any, TypeVar

from services.monitor.nvml_calls import compute_processes, optional, text
from services.monitor.nvml_mig import read_instances, with_instances
from services.monitor.probe import GpuReading, GpuStatus, ProcessReading

T = TypeVar("T")


def load_nvml() -> ModuleType | None:
    """The pynvml module when NVML can be initialised here, else None."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return None
    return pynvml


@dataclass(frozen=True)
class NvmlReading:
    status: GpuStatus
    gpus: tuple[GpuReading, ...] = ()
    processes: tuple[ProcessReading, ...] = ()
    error: str | None = None


def read_gpus(nvml: Any, proc: ProcInfo | None = None) -> NvmlReading:
    """Every GPU of this machine with its figures, and the compute processes on each."""
    proc = proc or ProcInfo()
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as err:
        return NvmlReading(GpuStatus.ERROR, error=f"NVML: {err}")
    gpus: list[GpuReading] = []
    processes: list[ProcessReading] = []
    split = []  # the MIG instances of each GPU in MIG mode, with their processes
    errors: list[str] = []
    for index in range(count):
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            uuid = text(nvml.nvmlDeviceGetUUID(handle))
        except nvml.NVMLError as err:  # a lost GPU: the others are still read
            errors.append(f"NVML: GPU {index}: {err}")
            continue
        utilization = optional(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
        memory = optional(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
        power = optional(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        limit = optional(nvml, nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
        temperature = optional(
            nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU
        )
        fan = optional(nvml, nvml.nvmlDeviceGetFanSpeed, handle)
        clock_sm = optional(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_SM)
        clock_mem = optional(nvml, nvml.nvmlDeviceGetClockInfo, handle, nvml.NVML_CLOCK_MEM)
        gpus.append(
            GpuReading(
                uuid=uuid,
                index=index,
                name=text(nvml.nvmlDeviceGetName(handle)),
                utilization_gpu_percent=_float(utilization.gpu if utilization else None),
                utilization_memory_percent=_float(utilization.memory if utilization else None),
                memory_used_mib=memory.used / 2**20 if memory else None,
                memory_total_mib=memory.total / 2**20 if memory else None,
                temperature_c=_float(temperature),
                power_draw_w=power / 1000 if power is not None else None,
                power_limit_w=limit / 1000 if limit is not None else None,
                fan_speed_percent=_float(fan),
                clock_sm_mhz=_float(clock_sm),
                clock_memory_mhz=_float(clock_mem),
            )
        )
        processes.extend(compute_processes(nvml, handle, uuid, proc))
        split.append(read_instances(nvml, handle, gpus[-1], proc))
    processes.sort(key=lambda p: (p.gpu_uuid, p.pid))
    shown, placed = with_instances(gpus, processes, split)
    if errors:
        return NvmlReading(GpuStatus.ERROR, shown, placed, "; ".join(errors))
    return NvmlReading(GpuStatus.OK, shown, placed)


def _float(value: Any) -> float | None:
    return None if value is None else float(value)


class ProcInfo:
    """Owner, command line and start time of a local process, from /proc."""

    def __init__(self, root: str = "/proc") -> None:
        self.root = root

    def user(self, pid: int) -> str | None:
        try:
            uid = os.stat(f"{self.root}/{pid}").st_uid
            return pwd.getpwuid(uid).pw_name
        except (OSError, KeyError):
            return None

    def command(self, pid: int) -> str:
        try:
            with open(f"{self.root}/{pid}/cmdline", "rb") as cmdline:
                return cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        except OSError:
            return ""

    def started_at(self, pid: int) -> datetime | None:
        try:
            with open(f"{self.root}/{pid}/stat") as stat:
                start_ticks = int(stat.read().rsplit(")", 1)[1].split()[19])
            with open(f"{self.root}/uptime") as uptime:
                up_s = float(uptime.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None
        boot = time.time() - up_s
        return datetime.fromtimestamp(boot + start_ticks / os.sysconf("SC_CLK_TCK"), UTC)


# --- fake --------------------------------------------------------------------------------------


class FakeNvmlError(Exception):
    pass


@dataclass
class FakeGpu:
    uuid: str
    name: str = "NVIDIA A100-SXM4-80GB"
    utilization: tuple[int, int] | None = (50, 20)
    memory: tuple[int, int] | None = (10 * 2**30, 80 * 2**30)  # used, total bytes
    temperature: int | None = 40
    power_mw: int | None = 250_000
    power_limit_mw: int | None = 400_000
    fan: int | None = None  # data-centre GPUs report no fan
    clocks: tuple[int, int] | None = (1410, 1593)
    processes: list[tuple[int, int | None]] = field(default_factory=list)  # pid, bytes
    # health (nvml_health.py); None: not supported
    lost: bool = False  # its handle cannot be had ("GPU is lost")
    ecc_uncorrected: int | None = 0
    remapped_rows: tuple[int, int, int, int] | None = (0, 0, 0, 0)  # corr, unc, pending, failure
    clock_reasons: int | None = 1  # idle
    pcie_width: tuple[int, int] | None = (16, 16)  # current, max
    xids: list[int] = field(default_factory=list)  # events waiting to be read


class FakeNvml:
    """The subset of pynvml that `read_gpus` uses; an unsupported figure raises NVMLError."""

    NVMLError = FakeNvmlError
    NVML_TEMPERATURE_GPU = 0
    NVML_CLOCK_SM = 1
    NVML_CLOCK_MEM = 2

    def __init__(self, gpus: list[FakeGpu]) -> None:
        self.gpus = gpus

    def _get(self, value: T | None) -> T:
        if value is None:
            raise FakeNvmlError("Not Supported")
        return value

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        if self.gpus[index].lost:
            raise FakeNvmlError("GPU is lost")
        return self.gpus[index]

    # health (nvml_health.py)
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = 1
    NVML_VOLATILE_ECC = 0

    def nvmlDeviceGetTotalEccErrors(self, gpu: FakeGpu, _type: int, _counter: int) -> int:
        return self._get(gpu.ecc_uncorrected)

    def nvmlDeviceGetRemappedRows(self, gpu: FakeGpu) -> tuple[int, int, int, int]:
        return self._get(gpu.remapped_rows)

    def nvmlDeviceGetRetiredPagesPendingStatus(self, gpu: FakeGpu) -> int:
        raise FakeNvmlError("Not Supported")  # as on Ampere and later

    def nvmlDeviceGetCurrentClocksEventReasons(self, gpu: FakeGpu) -> int:
        return self._get(gpu.clock_reasons)

    def nvmlDeviceGetCurrPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return self._get(gpu.pcie_width)[0]

    def nvmlDeviceGetMaxPcieLinkWidth(self, gpu: FakeGpu) -> int:
        return self._get(gpu.pcie_width)[1]

    def nvmlEventSetCreate(self) -> list[FakeGpu]:
        return []  # the GPUs registered

    def nvmlDeviceRegisterEvents(self, gpu: FakeGpu, _types: int, events: list[FakeGpu]) -> None:
        events.append(gpu)

    def nvmlEventSetWait(self, events: list[FakeGpu], _timeout_ms: int) -> Any:
        for gpu in events:
            if gpu.xids:
                return type("Event", (), {"device": gpu, "eventData": gpu.xids.pop(0)})()
        raise FakeNvmlError("Timeout")

    def nvmlDeviceGetUUID(self, gpu: FakeGpu) -> str:
        return gpu.uuid

    def nvmlDeviceGetName(self, gpu: FakeGpu) -> bytes:
        return gpu.name.encode()  # older bindings return bytes

    def nvmlDeviceGetUtilizationRates(self, gpu: FakeGpu) -> Any:
        gpu_percent, memory_percent = self._get(gpu.utilization)
        return type("Utilization", (), {"gpu": gpu_percent, "memory": memory_percent})()

    def nvmlDeviceGetMemoryInfo(self, gpu: FakeGpu) -> Any:
        used, total = self._get(gpu.memory)
        return type("Memory", (), {"used": used, "total": total})()

    def nvmlDeviceGetTemperature(self, gpu: FakeGpu, _sensor: int) -> int:
        return self._get(gpu.temperature)

    def nvmlDeviceGetPowerUsage(self, gpu: FakeGpu) -> int:
        return self._get(gpu.power_mw)

    def nvmlDeviceGetEnforcedPowerLimit(self, gpu: FakeGpu) -> int:
        return self._get(gpu.power_limit_mw)

    def nvmlDeviceGetFanSpeed(self, gpu: FakeGpu) -> int:
        return self._get(gpu.fan)

    def nvmlDeviceGetClockInfo(self, gpu: FakeGpu, clock: int) -> int:
        sm, mem = self._get(gpu.clocks)
        return sm if clock == self.NVML_CLOCK_SM else mem

    def nvmlDeviceGetComputeRunningProcesses(self, gpu: FakeGpu) -> list[Any]:
        return [
            type("Process", (), {"pid": pid, "usedGpuMemory": used})()
            for pid, used in gpu.processes
        ]


@dataclass
class FakeMigGpu(FakeGpu):
    """A GPU in MIG mode: its instances are FakeGpus of their own (None: an empty slot)."""

    mig: list[FakeGpu | None] = field(default_factory=list)


class FakeMigNvml(FakeNvml):
    """`FakeNvml` with the MIG calls of `nvml_mig.read_instances`."""

    NVML_DEVICE_MIG_ENABLE = 1

    def nvmlDeviceGetMigMode(self, gpu: FakeGpu) -> list[int]:
        on = int(isinstance(gpu, FakeMigGpu) and bool(gpu.mig))
        return [on, on]

    def nvmlDeviceGetMaxMigDeviceCount(self, gpu: FakeGpu) -> int:
        return 7 if isinstance(gpu, FakeMigGpu) else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, gpu: FakeGpu, index: int) -> FakeGpu:
        slots = gpu.mig if isinstance(gpu, FakeMigGpu) else []
        found = slots[index] if index < len(slots) else None
        if found is None:
            raise FakeNvmlError("Not Found")
        return found
