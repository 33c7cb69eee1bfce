"""MIG: a GPU split into instances, read over SSH without root, and its instances as GPUs (pure).

The probe's MIG sections (`MIG_PROBE_SECTIONS`, run inside `PROBE_COMMAND` before `@@end`):

    @@mig
    <nvidia-smi -L, only when it lists a MIG device (nothing on a host without one)>
    @@mig-smi                                              (only when `@@mig` has MIG lines)
    <the plain `nvidia-smi`, only its table rows: the MIG devices and the processes>

`nvidia-smi -L` names each instance: `  MIG 3g.40gb     Device  0: (UUID: MIG-<uuid>)` under its
`GPU <index>: <name> (UUID: GPU-<uuid>)` line (drivers before R470 print `MIG-GPU-<uuid>/<gi>/<ci>`
as the uuid). The plain `nvidia-smi` has two tables that any user may read: "MIG devices" (GPU,
GI ID, CI ID, MIG Dev, memory used / total) and "Processes" (GPU, GI ID, CI ID, PID). Joined on
(GPU, MIG Dev) and (GPU, GI, CI), they tell which instance each process runs on: the
compute-apps query, which Warden reads for the processes' memory, usually names the parent GPU.

`apply_mig` turns a host's reading into one where each instance is a GPU of its own:

- its uuid is the instance's (`MIG-...`), what `CUDA_VISIBLE_DEVICES` takes;
- its index is `mig_index(parent index, MIG Dev)` = 1000 x (parent index + 1) + MIG Dev, so
  instance 1 of GPU 0 is index 1001, written `host:1001` (or `host:0/mig1`), never the same as a
  whole GPU's index;
- its name is the parent's name and the profile (`NVIDIA A100-SXM4-40GB MIG 3g.20gb`, as NVML
  names a MIG device); memory used and total are the instance's; temperature and power are not
  reported per instance (None), nor is utilisation, except that an instance with no process on
  it is at 0 % (nothing can run there) when every process of its GPU was placed on an instance:
  so a reservation of an unused instance can be found idle, and one of a used instance never is;
- `mig_parent_uuid` names the parent, which stays in the reading (its temperature and power are
  the board's) and is "split": not bookable whole while it has instances.

Processes on an instance get the instance's uuid; a process the tables do not place (a driver
that hides other users' processes from a non-root `nvidia-smi`) stays on the parent GPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from services.monitor.probe import GpuReading, HostReading, ProcessReading

MIG_INDEX_BASE = 1000

MIG_PROBE_SECTIONS = """\
echo '@@mig'
l=$(nvidia-smi -L 2>/dev/null)
case "$l" in *'MIG '*) printf '%s\\n' "$l"; echo '@@mig-smi'
nvidia-smi 2>/dev/null | grep -E '^\\| +[0-9]|MIG devices|Processes:';; esac
"""

_GPU_LINE = re.compile(r"^GPU (\d+): (.*?) \(UUID: (\S+?)\)\s*$")
_MIG_LINE = re.compile(r"^\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (\S+?)\)\s*$")
_MIG_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+)\s+\|\s+(\d+)\s*MiB\s*/\s*(\d+)\s*MiB")
_PROCESS_ROW = re.compile(r"^\|\s+(\d+)\s+(\d+|N/A)\s+(\d+|N/A)\s+(\d+)\s+\S+\s")
_OLD_MIG_UUID = re.compile(r"^MIG-(GPU-[^/]+)/(\d+)/(\d+)$")


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance as `nvidia-smi -L` lists it, with what the MIG devices table adds."""

    parent_index: int
    parent_uuid: str
    device: int  # "MIG Dev": its number on its GPU
    profile: str  # e.g. 3g.40gb
    uuid: str
    gi: int | None = None
    ci: int | None = None
    memory_used_mib: float | None = None
    memory_total_mib: float | None = None

    @property
    def index(self) -> int:
        return mig_index(self.parent_index, self.device)


@dataclass(frozen=True)
class MigReading:
    devices: tuple[MigDevice, ...] = ()
    pids: tuple[tuple[int, int, int, int], ...] = ()  # (gpu index, gi, ci, pid)


def mig_index(parent_index: int, device: int) -> int:
    """The index an instance has among its host's GPUs: 1000 x (parent + 1) + MIG Dev."""
    return MIG_INDEX_BASE * (parent_index + 1) + device


def mig_place(index: int) -> tuple[int, int] | None:
    """(parent index, MIG Dev) of an instance's index; None for a whole GPU's."""
    if index < MIG_INDEX_BASE:
        return None
    return index // MIG_INDEX_BASE - 1, index % MIG_INDEX_BASE


def parse_mig_list(lines: list[str]) -> list[MigDevice]:
    """The MIG devices of `nvidia-smi -L`, each under its GPU's line."""
    devices: list[MigDevice] = []
    parent: tuple[int, str] | None = None
    for line in lines:
        gpu = _GPU_LINE.match(line)
        if gpu:
            parent = (int(gpu[1]), gpu[3])
            continue
        mig = _MIG_LINE.match(line)
        if mig and parent is not None:
            devices.append(MigDevice(parent[0], parent[1], int(mig[2]), mig[1], mig[3]))
    return devices


_Table = dict[tuple[int, int], tuple[int, int, int, int]]


def parse_mig_smi(lines: list[str]) -> tuple[_Table, list[tuple[int, int, int, int]]]:
    """From the plain `nvidia-smi`: (GPU, MIG Dev) -> (GI, CI, used MiB, total MiB) of the MIG
    devices table, and (GPU, GI, CI, PID) of each process row on a MIG device."""
    table: _Table = {}
    pids: list[tuple[int, int, int, int]] = []
    part = None
    for line in lines:
        if "MIG devices" in line:
            part = "mig"
        elif "Processes:" in line:
            part = "processes"
        elif part == "mig" and (row := _MIG_ROW.match(line)):
            gpu, gi, ci, dev, used, total = map(int, row.groups())
            table[(gpu, dev)] = (gi, ci, used, total)
        elif (
            part == "processes"
            and (proc := _PROCESS_ROW.match(line))
            and "N/A" not in (proc[2], proc[3])
        ):
            pids.append((int(proc[1]), int(proc[2]), int(proc[3]), int(proc[4])))
    return table, pids


def parse_mig_sections(mig_lines: list[str], smi_lines: list[str]) -> MigReading:
    """The probe's `@@mig` and `@@mig-smi` sections."""
    devices = parse_mig_list(mig_lines)
    if not devices:
        return MigReading()
    table, pids = parse_mig_smi(smi_lines)
    joined = []
    for device in devices:
        row = table.get((device.parent_index, device.device))
        gi = ci = None
        if row is not None:
            gi, ci, used, total = row
            device = replace(device, gi=gi, ci=ci, memory_used_mib=used, memory_total_mib=total)
        else:
            old = _OLD_MIG_UUID.match(device.uuid)  # the uuid itself says where it is
            if old:
                device = replace(device, gi=int(old[2]), ci=int(old[3]))
        joined.append(device)
    return MigReading(tuple(joined), tuple(pids))


def apply_mig(reading: HostReading, mig: MigReading) -> HostReading:
    """`reading` with each MIG instance as a GPU and each process on its instance."""
    if not mig.devices:
        return reading
    parents = {gpu.uuid: gpu for gpu in reading.gpus}
    instances = [
        _instance_gpu(device, parents[device.parent_uuid])
        for device in mig.devices
        if device.parent_uuid in parents
    ]
    if not instances:
        return reading
    known = {d.uuid for d in mig.devices}
    placed = [(d, d.gi, d.ci) for d in mig.devices]
    by_place = {(d.parent_index, gi, ci): d.uuid for d, gi, ci in placed if gi is not None}
    by_old_uuid: dict[tuple[str, int, int], str] = {
        (d.parent_uuid, gi, ci): d.uuid for d, gi, ci in placed if gi is not None and ci is not None
    }
    parent_index = {d.parent_uuid: d.parent_index for d in mig.devices}
    on_instance: dict[tuple[int, int], str] = {}  # (parent index, pid) -> instance uuid
    for gpu, gi, ci, pid in mig.pids:
        uuid = by_place.get((gpu, gi, ci))
        if uuid is not None:
            on_instance[(gpu, pid)] = uuid
    processes = tuple(
        sorted(
            (_placed(p, known, parent_index, on_instance, by_old_uuid) for p in reading.processes),
            key=lambda p: (p.gpu_uuid, p.pid),
        )
    )
    instances = idle_instances(instances, processes)
    gpus = tuple(sorted((*reading.gpus, *instances), key=lambda g: g.index))
    return replace(reading, gpus=gpus, processes=processes)


def _instance_gpu(device: MigDevice, parent: GpuReading) -> GpuReading:
    return type(parent)(
        uuid=device.uuid,
        index=device.index,
        name=f"{parent.name or 'GPU'} MIG {device.profile}",
        memory_used_mib=device.memory_used_mib,
        memory_total_mib=device.memory_total_mib,
        mig_parent_uuid=device.parent_uuid,
    )


def idle_instances(
    instances: list[GpuReading], processes: tuple[ProcessReading, ...]
) -> list[GpuReading]:
    """0 % utilisation for an instance without a process, when no process of its GPU is left
    unplaced (it might run on that instance); None (not reported) for the others."""
    used = {p.gpu_uuid for p in processes}
    return [
        replace(gpu, utilization_gpu_percent=0.0)
        if gpu.uuid not in used and gpu.mig_parent_uuid not in used
        else gpu
        for gpu in instances
    ]


def _placed(
    process: ProcessReading,
    known: set[str],
    parent_index: dict[str, int],
    on_instance: dict[tuple[int, int], str],
    by_old_uuid: dict[tuple[str, int, int], str],
) -> ProcessReading:
    """The process on its instance, when the tables or its own uuid say which."""
    if process.gpu_uuid in known:
        return process
    old = _OLD_MIG_UUID.match(process.gpu_uuid)
    if old:
        uuid = by_old_uuid.get((old[1], int(old[2]), int(old[3])))
        return process if uuid is None else replace(process, gpu_uuid=uuid)
    index = parent_index.get(process.gpu_uuid)
    if index is None:
        return process
    uuid = on_instance.get((index, process.pid))
    return process if uuid is None else replace(process, gpu_uuid=uuid)
