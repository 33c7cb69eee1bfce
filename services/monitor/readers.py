"""How one host is read: over SSH with the probe command, or this machine through NVML."""

from __future__ import annotations

import asyncio
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.monitor.nvml import ProcInfo, read_gpus
from services.monitor.nvml_health import NvmlHealth
from services.monitor.nvml_topology import read_topology
from services.monitor.probe import (
    TOPOLOGY_EVERY_S,
    GpuStatus,
    HealthMemo,
    HostReading,
    ProbeOutputError,
    parse_loadavg,
    parse_meminfo,
    parse_probe_output,
    parse_proc_stat_line,
    probe_command,
)
from services.shared.config import HostConfig
from services.shared.remote.ssh import HostShell, HostUnreachable


class HostReader(ABC):
    name: str
    config: HostConfig | None = None  # the inventory's entry it reads (set by who made it)

    @abstractmethod
    async def read(self, timeout: float) -> HostReading:
        """Everything one poll returns; HostUnreachable when the host cannot be read."""

    async def close(self) -> None:  # noqa: B027 (most readers hold nothing)
        """Release what the reader holds (connections)."""

    @property
    def connected(self) -> bool:
        """Whether its connection is open, so that a read needs no handshake."""
        return False

    async def connect(self, timeout: float) -> None:  # noqa: B027 (most readers hold nothing)
        """Open its connection ahead of the first read; HostUnreachable when it cannot."""


class SshReader(HostReader):
    """Runs the probe command on the host: one round trip per poll. The GPU interconnect
    (`nvidia-smi topo -m`) is read with it on the first poll, every `topology_every_s` and
    on the poll after the host's GPUs changed."""

    def __init__(self, shell: HostShell, topology_every_s: float = TOPOLOGY_EVERY_S) -> None:
        self.name = shell.name
        self.shell = shell
        self.topology_every_s = topology_every_s
        self._topology_due = 0.0  # monotonic time of the next topology read
        self._gpu_set: frozenset[str] | None = None
        self._health = HealthMemo()

    async def read(self, timeout: float) -> HostReading:
        topology = time.monotonic() >= self._topology_due
        result = await self.shell.run(probe_command(topology), timeout)
        try:
            reading = parse_probe_output(result.stdout, self._health)
        except ProbeOutputError as err:
            detail = (result.stderr.strip().splitlines() or [str(err)])[-1][:200]
            raise HostUnreachable(
                f"{self.name}: the probe did not run ({detail})",
                {"host": self.name, "reason": f"probe did not run: {detail}"},
            ) from err
        self._next_topology(reading)
        return reading

    def _next_topology(self, reading: HostReading) -> None:
        if reading.topology_read:
            self._topology_due = time.monotonic() + self.topology_every_s
        if reading.gpu_status is GpuStatus.OK:
            gpus = frozenset(gpu.uuid for gpu in reading.gpus)
            if self._gpu_set is not None and gpus != self._gpu_set:
                self._topology_due = 0.0  # the GPUs changed: read their links next poll
            self._gpu_set = gpus

    async def close(self) -> None:
        await self.shell.close()

    @property
    def connected(self) -> bool:
        return self.shell.connected

    async def connect(self, timeout: float) -> None:
        await self.shell.connect(timeout)


class LocalNvmlReader(HostReader):
    """This machine: GPUs through NVML (in a thread: NVML calls block), CPU from /proc."""

    def __init__(self, name: str, nvml: Any | None, proc_root: str = "/proc") -> None:
        self.name = name
        self.nvml = nvml
        self.proc_root = proc_root
        self._topology_due = 0.0  # monotonic: the interconnect is read now and then
        self.health = None if nvml is None else NvmlHealth(nvml)  # keeps its XID events

    async def read(self, timeout: float) -> HostReading:
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(self._read)

    def _read(self) -> HostReading:
        root = Path(self.proc_root)
        stat_line = (root / "stat").read_text().splitlines()[0]
        gpus = None if self.nvml is None else read_gpus(self.nvml, ProcInfo(self.proc_root))
        memory_used, memory_total = parse_meminfo((root / "meminfo").read_text().splitlines())
        topology_read = gpus is not None and time.monotonic() >= self._topology_due
        if topology_read:
            self._topology_due = time.monotonic() + TOPOLOGY_EVERY_S
        return HostReading(
            host_time=datetime.now(UTC),
            cpu=parse_proc_stat_line(stat_line),
            load=parse_loadavg((root / "loadavg").read_text()),
            memory_used_mib=memory_used,
            memory_total_mib=memory_total,
            gpu_status=gpus.status if gpus else GpuStatus.NO_GPU,
            gpu_error=gpus.error if gpus else None,
            gpus=gpus.gpus if gpus else (),
            processes=gpus.processes if gpus else (),
            topology_read=topology_read,
            topology=read_topology(self.nvml) if topology_read else None,
            health=self.health.read() if self.health is not None else None,
        )


class FakeReader(HostReader):
    """Returns what `answer` gives (a reading, or raises HostUnreachable); counts its reads."""

    def __init__(self, name: str, answer: Callable[[], HostReading]) -> None:
        self.name = name
        self.answer = answer
        self.reads = 0

    async def read(self, timeout: float) -> HostReading:
        self.reads += 1
        return self.answer()
