"""What one monitor replica answers about itself (on an RPC queue of its own), and the fleet's
snapshot put together from every replica's part.

Each replica serves `monitor-r<id>` beside the shared `monitor` queue and says that name in
its heartbeats (`details.rpc`). `monitor.snapshot`, answered by any replica, is its own hosts
plus what the others answer for theirs; a host of the inventory that no replica answers for
(being handed over, or its replica just died) shows as not polled yet.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from services.monitor.fleet_view import transitions
from services.monitor.hosts.inventory import InventoryHost
from services.monitor.monitor import Monitor, MonitorStats, host_entry
from services.monitor.state import HostState
from services.shared.bus import Bus, RpcHandler
from services.shared.cluster.replicas import Replicas

log = logging.getLogger("warden.monitor")

SERVICE = "monitor"
PEER_TIMEOUT_S = 2.0


def rpc_name(replica_id: str) -> str:
    """The RPC service name of one replica (no dots: it is the first word of a routing key)."""
    return f"monitor-r{replica_id.rsplit('-', 1)[-1]}"


def replica_methods(monitor: Monitor, replica_id: str) -> dict[str, RpcHandler]:
    async def snapshot(args: dict[str, Any]) -> dict[str, Any]:
        return monitor.snapshot(args.get("host"))

    async def stats(args: dict[str, Any]) -> dict[str, Any]:
        figures = {"replica": replica_id, "hosts": len(monitor.states), **monitor.stats.as_dict()}
        if args.get("reset"):
            monitor.stats = MonitorStats()
        return figures

    async def announced(args: dict[str, Any]) -> dict[str, Any]:
        return {"hosts": [transitions(state) for state in monitor.states.values()]}

    return {"snapshot": snapshot, "stats": stats, "transitions": announced}


class Peers:
    """The other live monitor replicas, called one by one."""

    def __init__(self, bus: Bus, replicas: Replicas) -> None:
        self.bus = bus
        self.replicas = replicas

    def names(self, only: list[str] | None = None) -> list[str]:
        found = []
        for replica in self.replicas.live(SERVICE):
            name = replica.details.get("rpc")
            if replica.replica == self.replicas.replica_id or not isinstance(name, str):
                continue
            if only is None or replica.replica in only:
                found.append(name)
        return found

    async def ask(
        self, method: str, args: Mapping[str, Any], only: list[str] | None = None
    ) -> list[Any]:
        """The answers of those that answered within PEER_TIMEOUT_S."""
        names = self.names(only)
        answers = await asyncio.gather(
            *(self.bus.call(n, method, args, timeout=PEER_TIMEOUT_S) for n in names),
            return_exceptions=True,
        )
        found = []
        for name, answer in zip(names, answers, strict=True):
            if isinstance(answer, BaseException):
                log.debug("monitor replica %s did not answer %s: %s", name, method, answer)
            else:
                found.append(answer)
        return found


async def fleet_snapshot(
    monitor: Monitor,
    peers: Peers,
    inventory: Mapping[str, InventoryHost],
    host: str | None,
) -> dict[str, Any]:
    """Every host's latest state (or `host`'s), from whichever replica polls it."""
    entries: dict[str, dict[str, Any]] = {}
    parts = [monitor.snapshot(host)]
    if peers.names():
        parts += await peers.ask("snapshot", {"host": host})
    for part in parts:
        for entry in part["hosts"]:
            seen = entries.get(entry["name"])
            # Two answers for one host only during a handover: the fresher one.
            if seen is None or (entry["last_seen"] or "") > (seen["last_seen"] or ""):
                entries[entry["name"]] = entry
    for name, found in inventory.items():
        if name not in entries and (host is None or name == host):
            entries[name] = host_entry(name, found.host.labels, HostState(name))
    hosts = [entries[name] for name in sorted(entries)]
    return {"generated_at": datetime.now(UTC).isoformat(), "hosts": hosts}
