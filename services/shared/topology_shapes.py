"""Typical GPU interconnects, by name (pure): what `warden sim --topology` gives its hosts and
what `bench/placement.py` draws its fleets from.

- `nvlink-mesh`: every pair joined by NVLink (NV12, as an NVSwitch DGX A100 reports it);
- `nvlink-quads`: NVLink (NV4) within each group of four GPUs, SYS between the groups;
- `nvlink-pairs`: NVLink (NV2) within pairs, PXB within each group of four, SYS across;
- `pcie`: no NVLink: PIX within pairs, PXB within each group of four, SYS across.

Each half of the GPUs is on its own NUMA node (cores split evenly), as on a two-socket server.
"""

from __future__ import annotations

from collections.abc import Callable

from services.shared.topology import SELF, TopoGpu, Topology

SHAPES = ("nvlink-mesh", "nvlink-quads", "nvlink-pairs", "pcie")


def _mesh(a: int, b: int, n: int) -> str:
    return "NV12"


def _quads(a: int, b: int, n: int) -> str:
    return "NV4" if a // 4 == b // 4 else "SYS"


def _pairs(a: int, b: int, n: int) -> str:
    if a // 2 == b // 2:
        return "NV2"
    return "PXB" if a // 4 == b // 4 else "SYS"


def _pcie(a: int, b: int, n: int) -> str:
    if a // 2 == b // 2:
        return "PIX"
    return "PXB" if a // 4 == b // 4 else "SYS"


_LINKS: dict[str, Callable[[int, int, int], str]] = {
    "nvlink-mesh": _mesh,
    "nvlink-quads": _quads,
    "nvlink-pairs": _pairs,
    "pcie": _pcie,
}


def shape(name: str, gpu_count: int, cores: int = 64) -> Topology:
    """The topology `name` on a host of `gpu_count` GPUs (ValueError for an unknown name)."""
    links = _LINKS.get(name)
    if links is None:
        raise ValueError(f"unknown topology {name!r} (known: {', '.join(SHAPES)})")
    nodes = 2 if gpu_count > 4 else 1
    per_node = max(cores // nodes, 1)
    gpus = []
    for a in range(gpu_count):
        node = a * nodes // max(gpu_count, 1)
        row = tuple(
            SELF if a == b else _across(links(a, b, gpu_count), a, b, gpu_count, nodes)
            for b in range(gpu_count)
        )
        cpus = f"{node * per_node}-{(node + 1) * per_node - 1}"
        gpus.append(TopoGpu(a, row, cpus, node))
    return Topology(tuple(gpus))


def _across(link: str, a: int, b: int, n: int, nodes: int) -> str:
    """SYS only between NUMA nodes: on a one-node host the groups meet at a host bridge."""
    if link == "SYS" and nodes == 1:
        return "NODE"
    return link
