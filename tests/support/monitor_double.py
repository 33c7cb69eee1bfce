"""A test double of the monitor's host inventory: it serves `list_hosts` (through
`services.shared.rpc.served`, so the answer is checked against the monitor's api) and publishes
the real `host.added`, `host.updated` and `host.removed` events; and, as the monitor does once
it polled a host, `gpu.discovered` and `processes.observed`. Used where the monitor itself does
not run, to drive the services that follow the host list (jobs, violations, reservations).

    double = MonitorDouble(bus)
    await double.serve()
    await double.add(record("sim-002", address="127.0.0.1", port=2222, user="warden"))
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from services.monitor import api as monitor_api
from services.shared.bus import Bus, Teardown
from services.shared.rpc import served


def host_record(name: str, **fields: Any) -> dict[str, Any]:
    """A HostRecord as the monitor answers it (fields override the defaults)."""
    return {
        "name": name,
        "address": "127.0.0.1",
        "port": 22,
        "user": "warden",
        "key_file": "",
        "probe": "ssh",
        "labels": [],
        "host_key": None,
        "source": "api",
        **fields,
    }


class MonitorDouble:
    """The inventory (`hosts`, by name), served and changed with its events."""

    def __init__(self, bus: Bus, hosts: Mapping[str, dict[str, Any]] | None = None) -> None:
        self.bus = bus
        self.hosts: dict[str, dict[str, Any]] = dict(hosts or {})
        self.listed = 0  # how many times list_hosts was answered
        self._stop: Teardown | None = None

    async def _list_hosts(self, _args: dict[str, Any]) -> dict[str, Any]:
        self.listed += 1
        return {"hosts": list(self.hosts.values())}

    async def serve(self) -> None:
        self._stop = await self.bus.serve(
            monitor_api.SERVICE,
            served([monitor_api.LIST_HOSTS], {monitor_api.LIST_HOSTS: self._list_hosts}),
        )

    async def stop(self) -> None:
        if self._stop is not None:
            await self._stop()
            self._stop = None

    async def add(self, record: dict[str, Any]) -> None:
        self.hosts[record["name"]] = record
        await self.bus.emit("host.added", {"host": record}, source="monitor")

    async def update(self, name: str, **fields: Any) -> None:
        self.hosts[name] = {**self.hosts[name], **fields}
        await self.bus.emit("host.updated", {"host": self.hosts[name]}, source="monitor")

    async def remove(self, name: str) -> None:
        del self.hosts[name]
        await self.bus.emit("host.removed", {"host": name}, source="monitor")

    async def discovered(self, host: str, index: int, uuid: str, name: str = "A100") -> None:
        data = {"host": host, "uuid": uuid, "index": index, "name": name}
        await self.bus.emit(
            "gpu.discovered", {**data, "memory_total_mib": 81920.0}, source="monitor"
        )

    async def observed(self, host: str, processes: list[tuple[int, str, str, str]]) -> None:
        """processes.observed on `host`: (pid, user, GPU uuid, command) of each process."""
        moment = datetime.now(UTC)
        listed = [
            {
                "gpu_uuid": gpu,
                "pid": pid,
                "user": user,
                "command": command,
                "used_memory_mib": 1024.0,
                "started_at": (moment - timedelta(seconds=30)).isoformat(),
            }
            for pid, user, gpu, command in processes
        ]
        data = {"host": host, "observed_at": moment.isoformat(), "processes": listed}
        await self.bus.emit("processes.observed", data, source="monitor")
