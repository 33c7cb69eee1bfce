"""The GPU interconnect: reading `nvidia-smi topo -m`, the probe's `@@topo` section, scoring
sets of GPUs, and choosing them over hosts."""

from __future__ import annotations

from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.monitor.probe import parse_probe_output, probe_command
from services.shared.topology import (
    PACK,
    SPREAD,
    Topology,
    best_set,
    choose_gpus,
    describe,
    link_cost,
    parse_topo_matrix,
    render_topo_matrix,
    set_cost,
)
from services.shared.topology_shapes import SHAPES, shape

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
TOPO = FIXTURES / "nvidia_smi_topo"  # `nvidia-smi topo -m` as printed


def _read(name: str) -> str:
    return (TOPO / name).read_text()


def test_link_costs_rank_nvlink_first_then_pcie_paths() -> None:
    order = ["NV12", "NV4", "NV1", "PIX", "PXB", "PHB", "NODE", "SYS"]
    costs = [link_cost(link) for link in order]
    assert costs == sorted(costs) and len(set(costs)) == len(costs)
    assert link_cost(None) > link_cost("SYS")
    assert link_cost("garbage") == link_cost(None)


def test_h200_single_gpu_with_the_ansi_escape_on_its_header() -> None:
    topology = parse_topo_matrix(_read("h200_1x.txt"))
    assert topology is not None
    [gpu] = topology.gpus
    assert (gpu.index, gpu.links, gpu.cpu_affinity, gpu.numa_node) == (0, ("X",), "0-15", 0)


def test_dgx_a100_full_mesh_with_nic_rows_and_columns() -> None:
    topology = parse_topo_matrix(_read("dgx_a100_nv12.txt"))
    assert topology is not None
    assert [g.index for g in topology.gpus] == list(range(8))
    assert all(len(g.links) == 8 for g in topology.gpus)  # NIC columns left out
    assert topology.link(0, 7) == "NV12" and topology.link(3, 3) == "X"
    assert topology.gpus[0].cpu_affinity == "48-63,176-191"
    assert [g.numa_node for g in topology.gpus] == [3, 3, 1, 1, 7, 7, 5, 5]


def test_two_nvlink_quads() -> None:
    topology = parse_topo_matrix(_read("nvlink_quads.txt"))
    assert topology is not None
    assert topology.link(1, 2) == "NV4" and topology.link(3, 4) == "SYS"
    assert topology.gpus[5].cpu_affinity == "32-63,96-127"
    assert topology.gpus[5].numa_node == 1
    assert topology == shape_like_fixture(topology)


def shape_like_fixture(topology: Topology) -> Topology:
    """The fixture's links are those of the simulator's `nvlink-quads`."""
    ours = shape("nvlink-quads", 8)
    assert [g.links for g in ours.gpus] == [g.links for g in topology.gpus]
    return topology


@pytest.mark.parametrize("text", ["", "NVIDIA-SMI has failed because ...\n", "Legend:\n"])
def test_no_matrix_is_none(text: str) -> None:
    assert parse_topo_matrix(text) is None


@pytest.mark.parametrize("name", SHAPES)
@pytest.mark.parametrize("gpus", [1, 4, 8])
def test_rendered_matrix_reads_back_the_same(name: str, gpus: int) -> None:
    topology = shape(name, gpus)
    assert parse_topo_matrix(render_topo_matrix(topology)) == topology
    assert Topology.from_dict(topology.to_dict()) == topology


def test_probe_output_carries_the_topology_section_only_when_asked() -> None:
    assert "topo -m" not in probe_command() and "topo -m" in probe_command(topology=True)
    assert probe_command(topology=True).rstrip().endswith("echo '@@end'")
    base = (FIXTURES / "nvidia_smi" / "a_100x8.txt").read_text()
    assert parse_probe_output(base).topology_read is False
    with_topo = base.replace("@@end", "@@topo\n" + _read("nvlink_quads.txt") + "@@topo-rc 0\n@@end")
    reading = parse_probe_output(with_topo)
    assert reading.topology_read and reading.topology is not None
    assert reading.topology.link(0, 1) == "NV4"
    assert len(reading.gpus) == 8  # the other sections read as before
    failed = base.replace("@@end", "@@topo\nNVIDIA-SMI has failed\n@@topo-rc 9\n@@end")
    reading = parse_probe_output(failed)
    assert reading.topology_read and reading.topology is None


QUADS = shape("nvlink-quads", 8)


def test_best_four_of_two_quads_is_a_quad() -> None:
    chosen, cost = best_set(QUADS, list(range(8)), 4)
    assert chosen == (0, 1, 2, 3) and cost == set_cost(QUADS, (0, 1, 2, 3))
    chosen, _ = best_set(QUADS, [0, 1, 2, 4, 5, 6, 7], 4)
    assert chosen == (4, 5, 6, 7)  # the whole quad beats three of one and one of the other
    assert describe(QUADS, "gpu-01", chosen) == "4 GPUs joined by NVLink on gpu-01"
    assert describe(QUADS, "gpu-01", (0, 4)) == "2 GPUs on gpu-01, across NUMA nodes"
    assert "not known" in describe(None, "gpu-01", (0, 4))


def test_anchors_draw_the_set_towards_what_the_work_holds() -> None:
    chosen, _ = best_set(QUADS, [0, 1, 5, 6], 2, anchors=(4,))
    assert chosen == (5, 6)


@settings(max_examples=60, deadline=None)
@given(
    name=st.sampled_from(SHAPES),
    free=st.sets(st.integers(0, 7), min_size=1),
    k=st.integers(1, 8),
)
def test_best_set_is_the_brute_force_best(name: str, free: set[int], k: int) -> None:
    topology = shape(name, 8)
    candidates = sorted(free)
    chosen, cost = best_set(topology, candidates, k)
    if k > len(candidates):
        assert chosen == ()
        return
    assert len(chosen) == k and set(chosen) <= free
    assert cost == min(set_cost(topology, c) for c in combinations(candidates, k))


def _fitting(*hosts: tuple[str, list[int]]) -> dict[str, list[tuple[int, str]]]:
    return {host: [(i, f"{host}:{i}") for i in indexes] for host, indexes in hosts}


def test_choose_prefers_the_quad_then_the_partly_used_host() -> None:
    topologies = {"a": QUADS, "b": QUADS, "c": QUADS}
    fitting = _fitting(("a", [0, 1, 4, 5, 6, 7]), ("b", list(range(8))), ("c", [0, 2, 5, 7]))
    choice = choose_gpus(fitting, 4, topologies, PACK)
    assert choice is not None
    assert choice.gpus == ("a:4", "a:5", "a:6", "a:7")  # a whole quad, on the fuller host
    assert choice.why == "4 GPUs joined by NVLink on a"
    spread = choose_gpus(fitting, 4, topologies, SPREAD)
    assert spread is not None and spread.gpus == ("b:0", "b:1", "b:2", "b:3")


def test_choose_fewest_hosts_when_none_has_enough() -> None:
    fitting = _fitting(("a", [0]), ("b", [0, 1, 2]), ("c", [4, 5]))
    choice = choose_gpus(fitting, 4, {}, PACK)
    assert choice is not None
    assert choice.hosts == ("b", "c") and choice.gpus == ("b:0", "b:1", "b:2", "c:4")
    assert "2 hosts" in choice.why
    assert choose_gpus(fitting, 7, {}, PACK) is None


def test_without_topology_the_first_gpus_by_index() -> None:
    choice = choose_gpus(_fitting(("a", [2, 3, 5])), 2, {}, PACK)
    assert choice is not None and choice.gpus == ("a:2", "a:3")
    assert "not known" in choice.why


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("GPU0123X NVSYIXB\t\n-,²٣A/"))))
def test_any_text_reads_as_a_matrix_or_none_never_raises(text: str) -> None:
    topology = parse_topo_matrix("\tGPU0\tGPU1\tCPU Affinity\tNUMA Affinity\n" + text)
    assert topology is None or all(isinstance(g.index, int) for g in topology.gpus)
