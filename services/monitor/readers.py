"""How one host is read: over SSH with the probe command, or this machine through NVML."""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from services.monitor.nvml import ProcInfo, read_gpus
from services.monitor.nvml_health import NvmlHealth
from services.monitor.probe import (
    PROBE_COMMAND,
    GpuStatus,
    HostReading,
    ProbeOutputError,
    parse_loadavg,
    parse_meminfo,
    parse_probe_output,
    parse_proc_stat_line,
)
from services.shared.remote.ssh import HostShell, HostUnreachable


class HostReader(ABC):
    name: str

    @abstractmethod
    async def read(self, timeout: float) -> HostReading:
        """Everything one poll returns; HostUnreachable when the host cannot be read."""

    async def close(self) -> None:  # noqa: B027 (most readers hold nothing)
        """Release what the reader holds (connections)."""


class SshReader(HostReader):
    """Runs the probe command on the host: one round trip per poll."""

    def __init__(self, shell: HostShell) -> None:
        self.name = shell.name
        self.shell = shell

    async def read(self, timeout: float) -> HostReading:
        result = await self.shell.run(PROBE_COMMAND, timeout)
        try:
            return parse_probe_output(result.stdout)
        except ProbeOutputError as err:
            detail = (result.stderr.strip().splitlines() or [str(err)])[-1][:200]
            raise HostUnreachable(
                f"{self.name}: the probe did not run ({detail})",
                {"host": self.name, "reason": f"probe did not run: {detail}"},
            ) from err

    async def close(self) -> None:
        await self.shell.close()


class LocalNvmlReader(HostReader):
    """This machine: GPUs through NVML (in a thread: NVML calls block), CPU from /proc."""

    def __init__(self, name: str, nvml: Any | None, proc_root: str = "/proc") -> None:
        self.name = name
        self.nvml = nvml
        self.proc_root = proc_root
        self.health = None if nvml is None else NvmlHealth(nvml)  # keeps its XID events

    async def read(self, timeout: float) -> HostReading:
        async with asyncio.timeout(timeout):
            return await asyncio.to_thread(self._read)

    def _read(self) -> HostReading:
        root = Path(self.proc_root)
        stat_line = (root / "stat").read_text().splitlines()[0]
        gpus = None if self.nvml is None else read_gpus(self.nvml, ProcInfo(self.proc_root))
        memory_used, memory_total = parse_meminfo((root / "meminfo").read_text().splitlines())
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
