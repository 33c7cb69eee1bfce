"""CPU affinity hints for a task (pure): the CPUs nearest its GPUs, from the host's
`nvidia-smi topo -m` (`[jobs] cpu_affinity = true`).

The hint binds the task's own shell before its command runs (`taskset -cp LIST $$`), so the
command, whatever shell code the owner wrote, runs as written and every process it starts
inherits the CPUs. When the GPUs' CPU lists are not known, or `taskset` is missing on the
host, the task runs unbound (a hint, never a reason not to start).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

from services.shared.topology import Topology

_CPU_LIST = re.compile(r"[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*")


def cpu_list(topology: Topology | None, gpu_indexes: Sequence[int]) -> str | None:
    """The CPUs nearest these GPUs ("0-31,64-95"): their CPU affinity lists joined; None when
    one is not known (or not a plain list of numbers and ranges)."""
    if topology is None or not gpu_indexes:
        return None
    lists: list[str] = []
    for index in gpu_indexes:
        gpu = topology.gpu(index)
        cpus = None if gpu is None else gpu.cpu_affinity
        if cpus is None or not _CPU_LIST.fullmatch(cpus):
            return None
        if cpus not in lists:
            lists.append(cpus)
    return ",".join(lists)


def affinity_prefix(topology: Topology | None, gpu_indexes: Sequence[int]) -> str | None:
    """The sh code that binds the task's shell to those CPUs, to put before its command."""
    cpus = cpu_list(topology, gpu_indexes)
    if cpus is None:
        return None
    return f"taskset -cp {shlex.quote(cpus)} $$ >/dev/null 2>&1;"


def with_affinity(command: str, prefix: str | None) -> str:
    return command if prefix is None else f"{prefix} {command}"
