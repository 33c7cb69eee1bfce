"""A local GPU in MIG mode through NVML: its instances as GPUs, each process on its instance.

The same shape as the SSH probe's (`services.monitor.mig`): an instance's uuid is its `MIG-...`,
its index `mig_index(GPU index, n)` where n counts the GPU's MIG devices in the order
`nvmlDeviceGetMigDeviceHandleByIndex` finds them (empty slots skipped), its name NVML's
(`NVIDIA A100-SXM4-40GB MIG 3g.20gb`), its memory its own, `mig_parent_uuid` its GPU. Processes
come from each instance's handle; the GPU's own list may name them too, and they move to their
instance. `FakeMigNvml` (in `nvml.py`) adds the MIG calls to `FakeNvml` for tests.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from services.monitor.mig import idle_instances, mig_index
from services.monitor.nvml_calls import compute_processes, optional, text
from services.monitor.probe import GpuReading, ProcessReading

if TYPE_CHECKING:
    from services.monitor.nvml import ProcInfo


def read_instances(
    nvml: Any, handle: Any, parent: GpuReading, proc: ProcInfo
) -> tuple[list[GpuReading], list[ProcessReading]]:
    """The MIG instances of the GPU at `handle` and their processes; nothing when it is not in
    MIG mode (or the bindings or the driver cannot say)."""
    get_mode = getattr(nvml, "nvmlDeviceGetMigMode", None)  # bindings older than MIG: none
    mode = None if get_mode is None else optional(nvml, get_mode, handle)
    if not mode or mode[0] != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return [], []
    count = optional(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    instances: list[GpuReading] = []
    processes: list[ProcessReading] = []
    for number in range(count):
        mig = optional(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, number)
        if mig is None:
            continue
        uuid = text(nvml.nvmlDeviceGetUUID(mig))
        name = optional(nvml, nvml.nvmlDeviceGetName, mig)
        memory = optional(nvml, nvml.nvmlDeviceGetMemoryInfo, mig)
        instances.append(
            GpuReading(
                uuid=uuid,
                index=mig_index(parent.index, len(instances)),
                name=text(name) if name is not None else f"{parent.name or 'GPU'} MIG",
                memory_used_mib=memory.used / 2**20 if memory else None,
                memory_total_mib=memory.total / 2**20 if memory else None,
                mig_parent_uuid=parent.uuid,
            )
        )
        processes.extend(compute_processes(nvml, mig, uuid, proc))
    return instances, processes


def with_instances(
    gpus: Sequence[GpuReading],
    processes: Sequence[ProcessReading],
    found: Sequence[tuple[list[GpuReading], list[ProcessReading]]],
) -> tuple[tuple[GpuReading, ...], tuple[ProcessReading, ...]]:
    """The GPUs with their instances (in index order), each process once, on its instance when
    it runs on one."""
    instances = [gpu for part, _ in found for gpu in part]
    placed = [p for _, part in found for p in part]
    if not instances:
        return tuple(gpus), tuple(processes)
    parents = {gpu.mig_parent_uuid for gpu in instances}
    moved = {p.pid for p in placed}
    kept = [p for p in processes if p.gpu_uuid not in parents or p.pid not in moved]
    every = sorted([*kept, *placed], key=lambda p: (p.gpu_uuid, p.pid))
    shown = sorted([*gpus, *idle_instances(instances, tuple(every))], key=lambda g: g.index)
    return tuple(shown), tuple(every)
