"""The interconnect of a machine read through NVML (`services/monitor/nvml_topology.py`), on a
fake NVML: direct NVLink, NVSwitch links, PCIe ancestors, CPU masks, what is not supported."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

from services.monitor.nvml import FakeGpu, FakeNvml
from services.monitor.nvml_topology import cpu_list, read_topology
from services.monitor.readers import LocalNvmlReader


class NvmlError(Exception):
    pass


@dataclass
class Board:
    bus: str
    links: list[str | None] = field(default_factory=list)  # remote bus per link; None: down
    mask: list[int] | None = None
    numa: int | None = None


class TopoNvml:
    NVMLError = NvmlError

    def __init__(self, boards: list[Board], ancestors: dict[tuple[int, int], int]) -> None:
        self.boards = boards
        self.ancestors = ancestors

    def nvmlDeviceGetCount(self) -> int:
        return len(self.boards)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> int:
        return index

    def nvmlDeviceGetPciInfo(self, handle: int) -> Any:
        return SimpleNamespace(busId=self.boards[handle].bus.encode())

    def nvmlDeviceGetNvLinkState(self, handle: int, link: int) -> int:
        links = self.boards[handle].links
        if not links:
            raise NvmlError("Not Supported")
        if link >= len(links):
            raise NvmlError("Invalid Argument")
        return 0 if links[link] is None else 1

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: int, link: int) -> Any:
        return SimpleNamespace(busId=self.boards[handle].links[link])

    def nvmlDeviceGetTopologyCommonAncestor(self, a: int, b: int) -> int:
        return self.ancestors.get((min(a, b), max(a, b)), 50)

    def nvmlDeviceGetCpuAffinity(self, handle: int, words: int) -> list[int]:
        mask = self.boards[handle].mask
        if mask is None:
            raise NvmlError("Not Supported")
        return mask

    def nvmlDeviceGetNumaNodeId(self, handle: int) -> int:
        numa = self.boards[handle].numa
        if numa is None:
            raise NvmlError("Not Supported")
        return numa


def test_cpu_masks_become_lists() -> None:
    assert cpu_list([0xFFFF]) == "0-15"
    assert cpu_list([0xFFFF0000FFFF, 0]) == "0-15,32-47"
    assert cpu_list([0b1011, 1]) == "0-1,3,64"
    assert cpu_list([0]) is None and cpu_list(None) is None


def test_direct_nvlink_nvswitch_and_pcie_paths() -> None:
    gpus = ["00000000:1A:00.0", "00000000:1B:00.0", "00000000:3A:00.0", "00000000:3B:00.0"]
    switch = "00000000:C0:00.0"
    boards = [
        Board(gpus[0], [gpus[1].lower(), gpus[1], None], [0xFFFF], 0),  # 2 links to GPU1
        Board(gpus[1], [gpus[0], gpus[0]], [0xFFFF], 0),
        Board(gpus[2], [switch] * 6, [0xFFFF0000], 1),  # 6 links to an NVSwitch
        Board(gpus[3], [switch] * 4, None, None),  # 4: NVLink not known as to CPUs
    ]
    nvml = TopoNvml(boards, {(0, 1): 10, (2, 3): 20, (0, 2): 50})
    topology = read_topology(nvml)
    assert topology is not None
    assert topology.link(0, 1) == "NV2"
    assert topology.link(2, 3) == "NV4"  # the fewer of their switch links
    assert topology.link(0, 2) == "SYS" and topology.link(1, 3) == "SYS"
    assert [g.cpu_affinity for g in topology.gpus] == ["0-15", "0-15", "16-31", None]
    assert [g.numa_node for g in topology.gpus] == [0, 0, 1, None]


def test_without_nvlink_the_pcie_ancestor_and_one_gpu_is_no_matrix() -> None:
    boards = [Board("0000:01:00.0"), Board("0000:02:00.0"), Board("0000:81:00.0")]
    nvml = TopoNvml(boards, {(0, 1): 20, (0, 2): 40, (1, 2): 99})
    topology = read_topology(nvml)
    assert topology is not None
    assert topology.link(0, 1) == "PXB" and topology.link(0, 2) == "NODE"
    assert topology.link(1, 2) == ""  # a level NVML did not document: unknown
    assert read_topology(TopoNvml(boards[:1], {})) is None


def test_the_local_reader_reads_the_interconnect_on_its_first_poll_then_now_and_then() -> None:
    nvml = FakeNvml([FakeGpu("GPU-a"), FakeGpu("GPU-b")])  # no topology calls: links unknown
    reader = LocalNvmlReader("local", nvml)
    first, second = reader._read(), reader._read()
    assert first.topology_read and first.topology is not None
    assert first.topology.link(0, 1) == "" and first.topology.cost(0, 1) > 0
    assert not second.topology_read and second.topology is None
