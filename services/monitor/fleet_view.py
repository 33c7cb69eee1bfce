"""What this monitor replica knows of the hosts other replicas poll: their transitions.

Every replica follows the monitor's own transition events (`gpu.discovered`,
`gpu.disappeared`, `host.unreachable`, `host.recovered`: rare, unlike `host.sampled`) on
queues of its own, and a replica that joins first asks the others for the state of theirs. A
host taken over from another replica then starts from what was announced of it: its GPUs are
not announced again (no `gpu.discovered` storm when hosts move), a host that was down does
not say `host.unreachable` a second time, and one that comes back says `host.recovered`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

from services.monitor.state import GpuIdentity, HostState
from services.shared.contracts import Envelope

TRANSITIONS = ("gpu.discovered", "gpu.disappeared", "host.unreachable", "host.recovered")


def _when(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None


def transitions(state: HostState) -> dict[str, Any]:
    """One host's announced state, as a peer sends it to a replica that joins."""
    return {
        "host": state.name,
        "reachable": state.reachable,
        "down_since": state.down_since.isoformat() if state.down_since else None,
        "down_reason": state.down_reason,
        "gpus": [
            {
                "uuid": gpu.uuid,
                "index": gpu.index,
                "name": gpu.name,
                "memory_total_mib": gpu.memory_total_mib,
                "mig_parent_uuid": gpu.mig_parent_uuid,
            }
            for gpu in state.gpus.values()
        ],
    }


class FleetView:
    def __init__(self) -> None:
        self.hosts: dict[str, HostState] = {}

    def _host(self, name: str) -> HostState:
        found = self.hosts.get(name)
        if found is None:
            found = self.hosts[name] = HostState(name)
        return found

    async def on_event(self, envelope: Envelope) -> None:
        self.apply(envelope.type, envelope.data)

    def apply(self, event_type: str, data: Mapping[str, Any]) -> None:
        host = self._host(data["host"])
        if event_type == "gpu.discovered":
            host.gpus[data["uuid"]] = GpuIdentity(
                data["uuid"],
                data["index"],
                data["name"] or None,
                data["memory_total_mib"],
                data.get("mig_parent_uuid"),
            )
        elif event_type == "gpu.disappeared":
            host.gpus.pop(data["uuid"], None)
        elif event_type == "host.unreachable":
            host.reachable, host.down_since = False, _when(data["since"])
            host.down_reason = data["reason"]
        elif event_type == "host.recovered":
            host.reachable, host.down_since, host.down_reason = True, None, None

    def load(self, hosts: Iterable[Mapping[str, Any]]) -> None:
        """Hosts as `transitions` gives them (a peer's answer)."""
        for data in hosts:
            host = self._host(data["host"])
            host.reachable = data["reachable"]
            host.down_since, host.down_reason = _when(data["down_since"]), data["down_reason"]
            host.gpus = {
                g["uuid"]: GpuIdentity(
                    g["uuid"],
                    g["index"],
                    g["name"],
                    g["memory_total_mib"],
                    g.get("mig_parent_uuid"),
                )
                for g in data["gpus"]
            }

    def forget(self, name: str) -> None:
        self.hosts.pop(name, None)

    def seed(self, name: str) -> HostState | None:
        """A fresh state for `name` that remembers what was announced of it (None: nothing)."""
        known = self.hosts.get(name)
        if known is None:
            return None
        return HostState(
            name,
            reachable=known.reachable,
            down_since=known.down_since,
            down_reason=known.down_reason,
            gpus=dict(known.gpus),
        )
