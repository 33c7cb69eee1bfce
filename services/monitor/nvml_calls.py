"""What every NVML reader shares: a call that may be unsupported, NVML's text, and the compute
processes of a device (a GPU, or a MIG instance)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from services.monitor.probe import ProcessReading

if TYPE_CHECKING:
    from services.monitor.nvml import ProcInfo

T = TypeVar("T")


def optional(nvml: Any, function: Callable[..., T], *args: Any) -> T | None:
    """`function(*args)`, or None when the GPU does not support or report it."""
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def compute_processes(nvml: Any, handle: Any, uuid: str, proc: ProcInfo) -> list[ProcessReading]:
    """The compute processes NVML lists on `handle`, named by `uuid`, with their owners."""
    running = optional(nvml, nvml.nvmlDeviceGetComputeRunningProcesses, handle)
    readings = []
    for process in running or ():
        used = getattr(process, "usedGpuMemory", None)
        readings.append(
            ProcessReading(
                pid=int(process.pid),
                gpu_uuid=uuid,
                used_memory_mib=used / 2**20 if isinstance(used, int) else None,
                user=proc.user(process.pid),
                command=proc.command(process.pid),
                started_at=proc.started_at(process.pid),
            )
        )
    return readings
