"""What the monitor knows about one host, and the events each poll result causes (pure).

`HostState.on_reading` and `HostState.on_failure` take what a poll returned and give back the
events to publish, in order. Transitions, not ticks: a host that stops answering produces one
`host.unreachable`, and one `host.recovered` when it answers again. A GPU is announced with
`gpu.discovered` when first seen or when its identity changes, and `gpu.disappeared` when the
host answered, its GPUs could be read, and that GPU was not among them. GPUs that cannot be
read (no nvidia-smi, driver error) are unknown, not gone.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from services.monitor.probe import (
    CpuCounters,
    GpuReading,
    GpuStatus,
    HostReading,
    ProcessReading,
    cpu_percent,
)
from services.monitor.tsdb.base import GPU_METRICS

Event = tuple[str, dict[str, Any]]  # (event type, data in wire form)


@dataclass(frozen=True)
class GpuIdentity:
    uuid: str
    index: int
    name: str | None
    memory_total_mib: float | None
    mig_parent_uuid: str | None = None


def _mig_parent(gpu: GpuReading) -> dict[str, str]:
    """A MIG instance's `mig_parent_uuid` (nothing for a whole GPU)."""
    return {} if gpu.mig_parent_uuid is None else {"mig_parent_uuid": gpu.mig_parent_uuid}


def _iso(when: datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def gpu_sample(gpu: GpuReading) -> dict[str, Any]:
    sample: dict[str, Any] = {"uuid": gpu.uuid, "index": gpu.index, "name": gpu.name}
    for figure in GPU_METRICS:
        sample[figure] = getattr(gpu, figure)
    return sample


def process_entry(process: ProcessReading) -> dict[str, Any]:
    return {
        "gpu_uuid": process.gpu_uuid,
        "pid": process.pid,
        "user": process.user,
        "command": process.command,
        "used_memory_mib": process.used_memory_mib,
        "started_at": _iso(process.started_at),
    }


def backoff_s(failures: int, interval_s: float, cap_s: float = 60.0, rng: Any = random) -> float:
    """How long to wait before trying a failed host again: exponential, capped, jittered."""
    base = min(cap_s, interval_s * 2 ** max(0, failures - 1))
    return float(base * rng.uniform(0.5, 1.0))


@dataclass
class HostState:
    name: str
    reachable: bool | None = None  # None: not polled yet
    down_since: datetime | None = None
    down_reason: str | None = None
    failures: int = 0
    retry_at: float = 0.0  # monotonic time before which a down host is not tried again
    cpu: CpuCounters | None = None
    gpus: dict[str, GpuIdentity] = field(default_factory=dict)
    last_sample: dict[str, Any] | None = None
    last_processes: list[dict[str, Any]] = field(default_factory=list)
    last_seen: datetime | None = None
    topology: dict[str, Any] | None = None  # the GPU interconnect as last read (wire form)

    def on_reading(self, reading: HostReading, at: datetime) -> list[Event]:
        events: list[Event] = []
        if self.reachable is False:
            events.append(
                (
                    "host.recovered",
                    {"host": self.name, "at": at.isoformat(), "down_since": _iso(self.down_since)},
                )
            )
        self.reachable, self.down_since, self.down_reason = True, None, None
        self.failures, self.retry_at, self.last_seen = 0, 0.0, at
        if reading.gpu_status is GpuStatus.OK:
            events.extend(self._gpu_changes(reading.gpus, at))
        if reading.topology_read:
            self.topology = reading.topology.to_dict() if reading.topology else None
            events.append(
                (
                    "host.topology_read",
                    {"host": self.name, "read_at": at.isoformat(), "topology": self.topology},
                )
            )
        percent = cpu_percent(self.cpu, reading.cpu)
        self.cpu = reading.cpu
        load = reading.load or (None, None, None)
        self.last_sample = {
            "host": self.name,
            "sampled_at": at.isoformat(),
            "cpu_percent": percent,
            "load_1m": load[0],
            "load_5m": load[1],
            "load_15m": load[2],
            "memory_used_mib": reading.memory_used_mib,
            "memory_total_mib": reading.memory_total_mib,
            "gpu_status": reading.gpu_status.value,
            "gpu_error": reading.gpu_error,
            "gpus": [gpu_sample(gpu) for gpu in reading.gpus],
        }
        events.append(("host.sampled", self.last_sample))
        self.last_processes = [process_entry(p) for p in reading.processes]
        events.append(
            (
                "processes.observed",
                {
                    "host": self.name,
                    "observed_at": at.isoformat(),
                    "processes": self.last_processes,
                },
            )
        )
        return events

    def _gpu_changes(self, gpus: tuple[GpuReading, ...], at: datetime) -> list[Event]:
        events: list[Event] = []
        seen = set()
        for gpu in gpus:
            seen.add(gpu.uuid)
            identity = GpuIdentity(
                gpu.uuid, gpu.index, gpu.name, gpu.memory_total_mib, gpu.mig_parent_uuid
            )
            if self.gpus.get(gpu.uuid) != identity:
                self.gpus[gpu.uuid] = identity
                events.append(
                    (
                        "gpu.discovered",
                        {
                            "host": self.name,
                            "uuid": gpu.uuid,
                            "index": gpu.index,
                            "name": gpu.name or "",
                            "memory_total_mib": gpu.memory_total_mib,
                            **_mig_parent(gpu),
                        },
                    )
                )
        for uuid in sorted(set(self.gpus) - seen):
            gone = self.gpus.pop(uuid)
            events.append(
                (
                    "gpu.disappeared",
                    {"host": self.name, "uuid": uuid, "index": gone.index, "at": at.isoformat()},
                )
            )
        return events

    def on_failure(
        self, reason: str, at: datetime, now: float, interval_s: float, *, back_off: bool = False
    ) -> list[Event]:
        """A poll failed at `at` (monotonic `now`); returns `host.unreachable` once per outage,
        and once more when the reason becomes one that needs a person (`back_off`: a refused
        key, a changed host key), so a host that comes back with another key shows that rather
        than how it went down.

        A host that is down, hung or restarting is tried again every interval, so it is
        fresh within one interval of answering again; only a failure that needs a person
        waits longer and longer (up to a minute) between tries.
        """
        self.failures += 1
        self.retry_at = now + backoff_s(self.failures, interval_s) if back_off else 0.0
        self.cpu = None  # a delta across an outage would be meaningless
        if self.reachable is False and (not back_off or reason == self.down_reason):
            return []
        if self.reachable is not False:
            self.reachable, self.down_since = False, at
        self.down_reason = reason
        since = (self.down_since or at).isoformat()
        return [("host.unreachable", {"host": self.name, "since": since, "reason": reason})]
