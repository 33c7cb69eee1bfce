"""This machine's GPU interconnect through NVML, as `nvidia-smi topo -m` would print it: for
hosts read with NVML (`[monitor] local_nvml`), where no shell command runs.

- NVLink: each GPU's active links (`nvmlDeviceGetNvLinkState`) and the PCI address at their
  other end (`nvmlDeviceGetNvLinkRemotePciInfo`): links to another GPU count as `NV#` for that
  pair; links to something else (an NVSwitch) join every two GPUs that both have some, as
  `NV<the fewer of their counts>` (what nvidia-smi prints on NVSwitch systems);
- otherwise the closest common PCIe ancestor (`nvmlDeviceGetTopologyCommonAncestor`): one
  switch PIX, several PXB, a host bridge PHB, one NUMA node NODE, across nodes SYS;
- each GPU's CPU affinity (`nvmlDeviceGetCpuAffinity`, a bit mask made a list "0-15,32-47") and
  NUMA node (`nvmlDeviceGetNumaNodeId`, when the bindings and the machine have it).

Anything NVML does not support is left unknown; one GPU or none: no matrix (None).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from typing import Any

from services.shared.topology import SELF, TopoGpu, Topology

# nvmlGpuTopologyLevel_t
_ANCESTOR = {0: "PIX", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
_ENABLED = 1  # NVML_FEATURE_ENABLED
_MAX_LINKS = 18  # NVML_NVLINK_MAX_LINKS


def _optional(nvml: Any, name: str, *args: Any) -> Any:
    function = getattr(nvml, name, None)
    if function is None:
        return None
    try:
        return function(*args)
    except nvml.NVMLError:
        return None


def _bus_id(pci: Any) -> str | None:
    """A PCI address as "domain:bus:device.function", the domain without its leading zeros."""
    if pci is None:
        return None
    raw = getattr(pci, "busId", None) or getattr(pci, "busIdLegacy", None)
    if raw is None:
        return None
    text = (raw.decode() if isinstance(raw, bytes) else str(raw)).strip().lower()
    domain, _, rest = text.partition(":")
    try:
        return f"{int(domain, 16):x}:{rest}"
    except ValueError:
        return text


def cpu_list(words: Sequence[int] | None) -> str | None:
    """CPU numbers set in NVML's affinity mask (64-bit words, lowest CPUs first) as ranges."""
    if not words:
        return None
    cpus = [w * 64 + bit for w, word in enumerate(words) for bit in range(64) if word >> bit & 1]
    if not cpus:
        return None
    ranges: list[str] = []
    start = prev = cpus[0]
    for cpu in [*cpus[1:], None]:
        if cpu is not None and cpu == prev + 1:
            prev = cpu
            continue
        ranges.append(str(start) if start == prev else f"{start}-{prev}")
        if cpu is not None:
            start = prev = cpu
    return ",".join(ranges)


def read_topology(nvml: Any) -> Topology | None:
    count = _optional(nvml, "nvmlDeviceGetCount") or 0
    if count < 2:
        return None
    handles = [_optional(nvml, "nvmlDeviceGetHandleByIndex", i) for i in range(count)]
    if any(handle is None for handle in handles):
        return None
    buses = [_bus_id(_optional(nvml, "nvmlDeviceGetPciInfo", h)) for h in handles]
    peers, switch = zip(*(_nvlinks(nvml, h, buses) for h in handles), strict=True)
    words = (os.cpu_count() or 64) // 64 + 1
    gpus = []
    for i, handle in enumerate(handles):
        links = tuple(
            SELF if i == j else _link(nvml, handle, other, peers[i][j], switch[i], switch[j])
            for j, other in enumerate(handles)
        )
        mask = _optional(nvml, "nvmlDeviceGetCpuAffinity", handle, words)
        numa = _optional(nvml, "nvmlDeviceGetNumaNodeId", handle)
        node = numa if isinstance(numa, int) and numa >= 0 else None
        gpus.append(TopoGpu(i, links, cpu_list(list(mask) if mask else None), node))
    return Topology(tuple(gpus))


def _nvlinks(nvml: Any, handle: Any, buses: list[str | None]) -> tuple[Counter[int], int]:
    """(active links to each other GPU by index, active links to anything else)."""
    to_gpu: Counter[int] = Counter()
    other = 0
    for link in range(_MAX_LINKS):
        if _optional(nvml, "nvmlDeviceGetNvLinkState", handle, link) != _ENABLED:
            continue
        remote = _bus_id(_optional(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link))
        if remote is not None and remote in buses:
            to_gpu[buses.index(remote)] += 1
        else:
            other += 1
    return to_gpu, other


def _link(nvml: Any, a: Any, b: Any, direct: int, switch_a: int, switch_b: int) -> str:
    if direct:
        return f"NV{direct}"
    if switch_a and switch_b:
        return f"NV{min(switch_a, switch_b)}"
    level = _optional(nvml, "nvmlDeviceGetTopologyCommonAncestor", a, b)
    return _ANCESTOR.get(level, "") if isinstance(level, int) else ""
