"""GPUs of a simulated host split into MIG instances, and what nvidia-smi prints about them.

A split GPU (`SimGpu.mig`) has instances numbered as nvidia-smi numbers them ("MIG Dev" 0, 1,
...), each with a profile (`3g.40gb`: 3 of the GPU's 7 compute slices, 40 GB), a uuid, a GPU
instance id (GI) and a compute instance id (CI). A process on a split GPU runs on one instance:
the one it was started on (`SimProcess.mig`), else the one its pid picks. The compute-apps query
names the parent GPU, as the drivers since R470 do; `nvidia-smi -L` lists the instances under
their GPU and the plain `nvidia-smi` places each process by (GPU, GI, CI), which is how the
monitor's probe (`services.monitor.mig`) tells them apart.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from services.shared.errors import InvalidRequest

_PROFILE = re.compile(r"^([1-7])g\.([1-9][0-9]*)gb$")
MAX_INSTANCES = 7
COMPUTE_SLICES = 7
# The models whose boards can be split; memory of a profile: its GB less what the driver keeps
# (as A100 and H100 report it: 3g.40gb has 40192 MiB).
MIG_MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")


@dataclass(frozen=True)
class SimMig:
    device: int
    profile: str
    uuid: str
    gi: int
    ci: int
    memory_total_mib: int


def instance_memory_mib(profile: str) -> int:
    gb = int(profile.split(".")[1][:-2])
    return gb * 1024 - 256 * (2 + gb // 40)


def make_instances(
    host_key: str, gpu_index: int, model_name: str, memory_total_mib: int, profiles: Sequence[str]
) -> tuple[SimMig, ...]:
    """The instances of a GPU split as `profiles` say; InvalidRequest when it cannot be."""
    if model_name not in MIG_MODELS:
        raise InvalidRequest(f"{model_name} has no MIG mode", {"mig_models": list(MIG_MODELS)})
    if not 0 < len(profiles) <= MAX_INSTANCES:
        raise InvalidRequest(f"a GPU splits into 1 to {MAX_INSTANCES} instances")
    slices = 0
    for profile in profiles:
        found = _PROFILE.match(profile) if isinstance(profile, str) else None
        if found is None:
            raise InvalidRequest(
                f"{profile!r} is not a MIG profile such as 3g.40gb", {"profile": profile}
            )
        slices += int(found[1])
    memory = sum(instance_memory_mib(p) for p in profiles)
    if slices > COMPUTE_SLICES or memory > memory_total_mib:
        raise InvalidRequest(
            f"{', '.join(profiles)} is more than one GPU holds ({COMPUTE_SLICES} compute slices, "
            f"{memory_total_mib} MiB)",
            {"profiles": list(profiles)},
        )
    rng = random.Random(f"{host_key}/mig/{gpu_index}/{','.join(profiles)}")
    return tuple(
        SimMig(
            device=device,
            profile=profile,
            uuid=_mig_uuid(rng),
            gi=device + 1,  # never the MIG Dev number: the probe must join the tables
            ci=0,
            memory_total_mib=instance_memory_mib(profile),
        )
        for device, profile in enumerate(profiles)
    )


def _mig_uuid(rng: random.Random) -> str:
    h = f"{rng.getrandbits(128):032x}"
    return f"MIG-{h[:8]}-{h[8:12]}-5{h[13:16]}-{h[16:20]}-{h[20:]}"


def parse_mig_option(text: str) -> dict[int, tuple[str, ...]]:
    """`0:3g.40gb,3g.40gb;1:7g.80gb` -> {0: ("3g.40gb", "3g.40gb"), 1: ("7g.80gb",)}."""
    split: dict[int, tuple[str, ...]] = {}
    for part in text.split(";"):
        index, sep, profiles = part.strip().partition(":")
        if not sep or not index.strip().isdigit() or not profiles.strip():
            raise ValueError(f"{part!r}: write GPU:PROFILE,PROFILE (e.g. 0:3g.40gb,3g.40gb)")
        split[int(index)] = tuple(p.strip() for p in profiles.split(","))
    return split


def check_instance(gpus: Sequence[Any], indexes: Sequence[int], mig: int | None) -> None:
    """A process started on instance `mig` runs on one split GPU that has it."""
    if mig is None:
        return
    if isinstance(mig, bool) or not isinstance(mig, int):
        raise InvalidRequest("mig must be an instance number (MIG Dev)", {"mig": mig})
    if len(indexes) != 1 or not 0 <= mig < len(gpus[indexes[0]].mig):
        raise InvalidRequest(
            f"mig {mig}: a process on a MIG instance runs on one split GPU that has it",
            {"mig": mig, "gpu": list(indexes)},
        )


def instance_of(instances: Sequence[SimMig], pid: int, mig: int | None) -> SimMig:
    """The instance a process runs on: the one it was started on, else the one its pid picks."""
    if mig is not None and 0 <= mig < len(instances):
        return instances[mig]
    return instances[pid % len(instances)]


# --- what nvidia-smi prints ---------------------------------------------------------------------


def list_lines(gpus: Sequence[tuple[int, str, str, Sequence[SimMig]]]) -> str:
    """`nvidia-smi -L`: (index, name, uuid, instances) of each GPU, instances under theirs."""
    out = []
    for index, name, uuid, instances in gpus:
        out.append(f"GPU {index}: {name} (UUID: {uuid})\n")
        out.extend(
            f"  MIG {m.profile:<12} Device {m.device:>2}: (UUID: {m.uuid})\n" for m in instances
        )
    return "".join(out)


def smi_table_rows(
    gpus: Sequence[tuple[int, str, Sequence[SimMig]]],
    used: Mapping[tuple[int, int], int],
    processes: Sequence[tuple[int, SimMig | None, int, str, int | None]],
) -> str:
    """The rows of the plain `nvidia-smi` the probe keeps (`grep -E '^\\| +[0-9]|MIG devices|
    Processes:'`): each GPU's first line, the MIG devices, the processes.

    `gpus`: (index, name, instances); `used`: MiB used on each (GPU, MIG Dev); `processes`:
    (GPU index, instance or None, pid, process name, MiB)."""
    out = []
    for index, name, instances in gpus:
        mode = "On" if instances else "0"
        bus = f"00000000:{index:02X}:00.0"
        out.append(f"|   {index:>2}  {name:<28} On  | {bus} Off |{mode:>21} |\n")
    out.append(f"| MIG devices:{'':<74}|\n")
    for index, _name, instances in gpus:
        for m in instances:
            mib = used.get((index, m.device), 0)
            out.append(
                f"| {index:>2}  {m.gi:>3} {m.ci:>3} {m.device:>3}  | "
                f"{mib:>14}MiB / {m.memory_total_mib:>5}MiB  | {0:>2}      0 |"
                "  1   0    0    0    0 |\n"
            )
    out.append(f"| Processes:{'':<76}|\n")
    for index, instance, pid, name, process_mib in processes:
        gi = "N/A" if instance is None else str(instance.gi)
        ci = "N/A" if instance is None else str(instance.ci)
        memory = "N/A" if process_mib is None else f"{process_mib}MiB"
        out.append(
            f"|  {index:>3}  {gi:>3}  {ci:>3}  {pid:>9}      C   {name[:38]:<38}  {memory:>10} |\n"
        )
    return "".join(out)
