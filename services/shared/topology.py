"""A host's GPU interconnect (`nvidia-smi topo -m`) and the scoring of GPU sets over it (pure).

The matrix says, for each pair of GPUs, what joins them, best first:

    NV#   a bonded set of # NVLinks (more is better)
    PIX   at most one PCIe bridge (one PCIe switch)
    PXB   several PCIe bridges, no host bridge
    PHB   a PCIe host bridge (the CPU)
    NODE  the interconnect between host bridges inside one NUMA node
    SYS   the SMP interconnect between NUMA nodes (QPI/UPI)

`parse_topo_matrix` reads nvidia-smi's text (ANSI escapes, NIC rows and the legend ignored);
`Topology` is the matrix with each GPU's CPU and NUMA affinity, and its wire form
(`to_dict`/`from_dict`) is what the monitor publishes (`host.topology`) and the host's page
shows. The scoring (`set_cost`, `best_set`, `choose_gpus`) is what the reservations' earliest
slot, the jobs' placement and `bench/placement.py` share: the best-connected set on one host,
then the fewest hosts; among equals, the partly used host (`pack`) or the emptiest (`spread`).
No I/O here: the reservations' rules and the jobs' queue import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from itertools import combinations
from typing import Any

PACK = "pack"
SPREAD = "spread"
PACKINGS = (PACK, SPREAD)

SELF = "X"
# Cost of a pair (lower is better); NV# is 64 - #, so any NVLink beats any PCIe path.
_PATH_COST = {"PIX": 100, "PXB": 200, "PHB": 300, "NODE": 400, "SYS": 500}
UNKNOWN_COST = 600  # a pair the matrix does not name (no topology read yet)
_NV = re.compile(r"NV(\d+)$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
_GPU_LABEL = re.compile(r"GPU(\d+)$")
# Beyond this many combinations `best_set` grows a set greedily instead of trying them all.
_EXHAUSTIVE_MAX = 5000

LEGEND = (
    ("X", "the GPU itself"),
    ("NV#", "a bonded set of # NVLinks"),
    ("PIX", "at most one PCIe bridge"),
    ("PXB", "several PCIe bridges, no host bridge"),
    ("PHB", "a PCIe host bridge (the CPU)"),
    ("NODE", "the link between PCIe host bridges within a NUMA node"),
    ("SYS", "the interconnect between NUMA nodes (QPI/UPI)"),
)


def link_cost(link: str | None) -> int:
    """What one pair's link costs (NV# best, more links better; then PIX .. SYS)."""
    if link is None:
        return UNKNOWN_COST
    nv = _NV.match(link)
    if nv is not None:
        return 64 - min(int(nv.group(1)), 63)
    return _PATH_COST.get(link, UNKNOWN_COST)


@dataclass(frozen=True)
class TopoGpu:
    index: int
    links: tuple[str, ...]  # to each GPU of the matrix, in the matrix's order ("X": itself)
    cpu_affinity: str | None = None  # "0-15,32-47"; None: not reported
    numa_node: int | None = None


@dataclass(frozen=True)
class Topology:
    gpus: tuple[TopoGpu, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "_pos", {g.index: i for i, g in enumerate(self.gpus)})
        costs = {
            (a.index, b.index): link_cost(a.links[j] if j < len(a.links) else None)
            for a in self.gpus
            for j, b in enumerate(self.gpus)
        }
        object.__setattr__(self, "_costs", costs)

    def cost(self, a: int, b: int) -> int:
        """`link_cost` of the link between GPU indexes a and b."""
        costs: dict[tuple[int, int], int] = self._costs  # type: ignore[attr-defined]
        return costs.get((a, b), UNKNOWN_COST)

    def link(self, a: int, b: int) -> str | None:
        """What joins GPU indexes a and b (None: one of them is not in the matrix)."""
        pos: dict[int, int] = self._pos  # type: ignore[attr-defined]
        i, j = pos.get(a), pos.get(b)
        if i is None or j is None:
            return None
        links = self.gpus[i].links
        return links[j] if j < len(links) else None

    def gpu(self, index: int) -> TopoGpu | None:
        pos: dict[int, int] = self._pos  # type: ignore[attr-defined]
        i = pos.get(index)
        return None if i is None else self.gpus[i]

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpus": [
                {
                    "index": g.index,
                    "links": list(g.links),
                    "cpu_affinity": g.cpu_affinity,
                    "numa_node": g.numa_node,
                }
                for g in self.gpus
            ]
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Topology:
        return cls(
            tuple(
                TopoGpu(
                    int(g["index"]),
                    tuple(str(link) for link in g.get("links") or ()),
                    g.get("cpu_affinity"),
                    g.get("numa_node"),
                )
                for g in data.get("gpus") or ()
            )
        )


# --- reading `nvidia-smi topo -m` ----------------------------------------------------------------


def _cells(line: str) -> list[str]:
    if "\t" in line:
        return [cell.strip() for cell in line.split("\t")]
    return [cell.strip() for cell in re.split(r" {2,}", line)]


def parse_topo_matrix(text: str) -> Topology | None:
    """The GPU rows of `nvidia-smi topo -m`; None when the text holds no matrix."""
    header: list[str] | None = None
    rows: list[list[str]] = []
    for raw in text.splitlines():
        line = _ANSI.sub("", raw).rstrip()
        if line.startswith("Legend"):
            break
        cells = _cells(line)
        if header is None:
            if "GPU0" in cells:
                header = cells
            continue
        if cells and _GPU_LABEL.match(cells[0]):
            rows.append(cells)
    if header is None or not rows:
        return None
    # Columns: the header's first cell is empty (the row labels' column); devices (GPU#,
    # NIC#) then "CPU Affinity", "NUMA Affinity" (rows may hold one more empty cell).
    devices = [c for c in header[1:] if re.match(r"(GPU|NIC|mlx)\S*$", c)]
    gpu_columns = [i for i, c in enumerate(devices) if _GPU_LABEL.match(c)]
    gpus = []
    for cells in rows:
        match = _GPU_LABEL.match(cells[0])
        assert match is not None
        values = cells[1:]
        links = tuple(values[i] if i < len(values) else "" for i in gpu_columns)
        rest = [v for v in values[len(devices) :] if v]
        cpu = rest[0] if rest and rest[0] != "N/A" else None
        numa = int(rest[1]) if len(rest) > 1 and rest[1].isdecimal() else None
        gpus.append(TopoGpu(int(match.group(1)), links, cpu, numa))
    return Topology(tuple(gpus))


def render_topo_matrix(topology: Topology) -> str:
    """`nvidia-smi topo -m` as a recent driver prints it (what the simulated hosts answer)."""
    names = [f"GPU{g.index}" for g in topology.gpus]
    head = "\t".join(["", *names, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
    lines = [f"\x1b[4m{head}\x1b[0m"]
    for g, name in zip(topology.gpus, names, strict=True):
        links = [f" {link} " if link == SELF else link for link in g.links]
        numa = "N/A" if g.numa_node is None else str(g.numa_node)
        lines.append("\t".join([name, *links, g.cpu_affinity or "N/A", numa, "", "N/A"]))
    lines += ["", "Legend:", ""]
    lines += [f"  {key:<4} = {text}" for key, text in LEGEND]
    return "\n".join(lines) + "\n"


# --- scoring ------------------------------------------------------------------------------------

Cost = tuple[int, int]  # (worst pair, sum over pairs): lower is better


def set_cost(topology: Topology | None, indexes: Sequence[int]) -> Cost:
    """How well a set of GPUs of one host is joined: its worst link first, then all its links."""
    worst = total = 0
    for i, a in enumerate(indexes):
        for b in indexes[i + 1 :]:
            cost = topology.cost(a, b) if topology is not None else UNKNOWN_COST
            if cost > worst:
                worst = cost
            total += cost
    return worst, total


def best_set(
    topology: Topology | None,
    candidates: Sequence[int],
    k: int,
    anchors: Sequence[int] = (),
    load: Callable[[Sequence[int]], Any] | None = None,
) -> tuple[tuple[int, ...], Cost]:
    """The k of `candidates` (in order: ties keep the earliest) best joined with each other and
    with `anchors` (GPUs the same work holds already); `load`, when given, gives a set's
    (first, last): `first` weighs before the links, `last` after them (e.g. idle GPUs before
    busy ones, then the least busy). Fewer than k candidates: ((), cost of nothing)."""
    if k <= 0 or len(candidates) < k:
        return (), (0, 0)
    if topology is None and load is None:
        chosen = tuple(candidates[:k])
        return chosen, set_cost(None, (*anchors, *chosen))
    if load is None and not anchors:
        # Hosts of one shape with the same free GPUs (whole hosts, above all) share one answer.
        key = (id(topology), tuple(candidates), k)
        known = _BEST.get(key)
        if known is not None and known[0] is topology:
            return known[1]
        if len(_BEST) >= _BEST_MAX:
            _BEST.clear()
        found = _best_set(topology, candidates, k, anchors, load)
        _BEST[key] = (topology, found)
        return found
    return _best_set(topology, candidates, k, anchors, load)


_BEST: dict[tuple[int, tuple[int, ...], int], tuple[Topology | None, Any]] = {}
_BEST_MAX = 4096


def _best_set(
    topology: Topology | None,
    candidates: Sequence[int],
    k: int,
    anchors: Sequence[int],
    load: Callable[[Sequence[int]], Any] | None,
) -> tuple[tuple[int, ...], Cost]:
    if _combinations(len(candidates), k) > _EXHAUSTIVE_MAX:
        return _greedy(topology, candidates, k, anchors, load)
    best: tuple[int, ...] = ()
    best_key: Any = None
    for combo in combinations(candidates, k):
        cost = set_cost(topology, (*anchors, *combo))
        key = _weighed(load, combo, cost)
        if best_key is None or key < best_key:
            best, best_key = combo, key
    return best, set_cost(topology, (*anchors, *best))


def _weighed(load: Callable[[Sequence[int]], Any] | None, combo: Sequence[int], cost: Cost) -> Any:
    if load is None:
        return cost
    first, last = load(combo)
    return first, cost, last


def _combinations(n: int, k: int) -> int:
    count = 1
    for i in range(min(k, n - k)):
        count = count * (n - i) // (i + 1)
    return count


def _greedy(
    topology: Topology | None,
    candidates: Sequence[int],
    k: int,
    anchors: Sequence[int],
    load: Callable[[Sequence[int]], Any] | None,
) -> tuple[tuple[int, ...], Cost]:
    chosen: list[int] = []
    left = list(candidates)
    while len(chosen) < k:

        def grown(index: int) -> Any:
            cost = set_cost(topology, (*anchors, *chosen, index))
            return _weighed(load, (*chosen, index), cost)

        pick = min(left, key=grown)
        chosen.append(pick)
        left.remove(pick)
    return tuple(chosen), set_cost(topology, (*anchors, *chosen))


def describe(topology: Topology | None, host: str, indexes: Sequence[int]) -> str:
    """In words, how a set of GPUs of one host is joined ("4 GPUs joined by NVLink on gpu-01")."""
    n = len(indexes)
    what = f"{n} GPU{'s' if n != 1 else ''}"
    if n < 2:
        return f"{what} on {host}"
    if topology is None or any(topology.gpu(i) is None for i in indexes):
        return f"{what} on {host} (its topology is not known)"
    worst = set_cost(topology, indexes)[0]
    if worst < _PATH_COST["PIX"]:
        return f"{what} joined by NVLink on {host}"
    word = {
        100: "behind one PCIe switch",
        200: "behind PCIe switches",
        300: "joined through a PCIe host bridge",
        400: "within one NUMA node",
        500: "across NUMA nodes",
    }.get(worst, "with links not known")
    return f"{what} on {host}, {word}"


# --- choosing GPUs over many hosts -------------------------------------------------------------


@dataclass(frozen=True)
class Choice:
    gpus: tuple[Hashable, ...]  # the chosen GPUs' keys (e.g. uuids), host by host
    hosts: tuple[str, ...]
    why: str
    rank: Any = None  # how it compares with another host's choice (lower is better)


def choose_gpus(
    fitting: Mapping[str, Sequence[tuple[int, Hashable]]],
    k: int,
    topologies: Mapping[str, Topology],
    packing: str = PACK,
    load: Callable[[Sequence[Hashable]], Any] | None = None,
) -> Choice | None:
    """k GPUs among `fitting` (host -> its fitting GPUs as (index, key), in order; hosts in
    order): the best-joined set on one host; among equally joined sets the host with the
    fewest fitting GPUs (`pack`: keep emptier hosts whole) or the most (`spread`); when no
    host has k, the fewest hosts (those with most fitting first). `load` gives a set's
    (first, last) by its keys: `first` weighs before everything (idle GPUs before busy ones),
    `last` after the links (the least busy). None when fewer than k fit in all."""
    if sum(len(v) for v in fitting.values()) < k:
        return None
    best: tuple[Any, str, tuple[int, ...]] | None = None
    for order, (host, gpus) in enumerate(fitting.items()):
        if len(gpus) < k:
            continue
        topology = topologies.get(host)
        keys = dict(gpus)
        host_load = None if load is None else (lambda s, keys=keys: load([keys[i] for i in s]))
        chosen: tuple[int, ...]
        if k == 1 and host_load is None:  # one GPU: no link to weigh
            chosen, cost = (gpus[0][0],), (0, 0)
        else:
            chosen, cost = best_set(topology, [i for i, _ in gpus], k, load=host_load)
        size = len(gpus) if packing == PACK else -len(gpus)
        first, last = host_load(chosen) if host_load is not None else (0, 0)
        rank = (first, cost, last, size, order)
        if best is None or rank < best[0]:
            best = (rank, host, chosen)
    if best is not None:
        _, host, chosen = best
        keys = dict(fitting[host])
        why = describe(topologies.get(host), host, chosen)
        return Choice(tuple(keys[i] for i in chosen), (host,), why, best[0][:4])
    return _fewest_hosts(fitting, k, topologies)


def _fewest_hosts(
    fitting: Mapping[str, Sequence[tuple[int, Hashable]]],
    k: int,
    topologies: Mapping[str, Topology],
) -> Choice:
    order = {host: i for i, host in enumerate(fitting)}
    hosts = sorted((h for h in fitting if fitting[h]), key=lambda h: (-len(fitting[h]), order[h]))
    chosen: list[Hashable] = []
    used: list[str] = []
    for host in hosts:
        want = min(k - len(chosen), len(fitting[host]))
        keys = dict(fitting[host])
        indexes, _ = best_set(topologies.get(host), [i for i, _ in fitting[host]], want)
        chosen += [keys[i] for i in indexes]
        used.append(host)
        if len(chosen) == k:
            break
    why = f"{k} GPUs on {len(used)} hosts ({', '.join(used)}): no host has {k} free"
    return Choice(tuple(chosen), tuple(used), why, (len(used),))
