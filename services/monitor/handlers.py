"""What the monitor answers: its RPC methods (declared in `api.py`, beside `health`), and the
events each replica follows on queues of its own: the inventory's changes made through another
replica, and the transitions of hosts other replicas poll (`fleet_view.py`).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from services.monitor import api
from services.monitor.fleet_view import TRANSITIONS, FleetView
from services.monitor.hosts.hosts_admin import HostsAdmin
from services.monitor.monitor import Monitor, MonitorStats
from services.monitor.replica_rpc import Peers, fleet_snapshot
from services.monitor.tsdb.base import MetricsStore
from services.shared.bus import EventHandler, RpcHandler
from services.shared.contracts import Envelope
from services.shared.errors import InvalidRequest, NotFound
from services.shared.rpc import served


def rpc_methods(  # noqa: C901 - one short closure per RPC method
    monitor: Monitor, store: MetricsStore, admin: HostsAdmin, peers: Peers
) -> dict[str, RpcHandler]:
    async def snapshot(args: dict[str, Any]) -> dict[str, Any]:
        host = args["host"]
        if host is not None and host not in admin.hosts and host not in monitor.states:
            raise NotFound(f"no host named {host!r}", {"host": host})
        return await fleet_snapshot(monitor, peers, admin.hosts, host)

    async def series(args: dict[str, Any]) -> dict[str, Any]:
        start: datetime = args["start"]
        end: datetime = args["end"]
        if end <= start:
            raise InvalidRequest("end must be after start", {"start": start.isoformat()})
        if (end - start) / timedelta(seconds=args["step_s"]) > api.MAX_BUCKETS:
            raise InvalidRequest(
                f"too many buckets: make step_s larger (at most {api.MAX_BUCKETS} per query)"
            )
        buckets = await store.series(
            args["host"], args["metric"], start, end, args["step_s"], args.get("gpu_uuid")
        )
        return {
            "host": args["host"],
            "gpu_uuid": args.get("gpu_uuid"),
            "metric": args["metric"],
            "step_s": args["step_s"],
            "buckets": [
                {
                    "start": b.start.isoformat(),
                    "min": b.min,
                    "avg": b.avg,
                    "max": b.max,
                    "count": b.count,
                }
                for b in buckets
            ],
        }

    async def stats(args: dict[str, Any]) -> dict[str, Any]:
        # This replica's figures (each replica polls its part of the hosts).
        figures = {
            "replica": peers.replicas.replica_id,
            "hosts": len(monitor.states),
            **monitor.stats.as_dict(),
        }
        if args["reset"]:
            monitor.stats = MonitorStats()
        return figures

    async def list_hosts(args: dict[str, Any]) -> dict[str, Any]:
        return {"hosts": admin.records()}

    async def add_host(args: dict[str, Any]) -> dict[str, Any]:
        return await admin.add(args)

    async def update_host(args: dict[str, Any]) -> dict[str, Any]:
        return await admin.update(args)

    async def remove_host(args: dict[str, Any]) -> dict[str, Any]:
        return await admin.remove(args)

    async def check_host(args: dict[str, Any]) -> dict[str, Any]:
        return await admin.check(args)

    async def prove_login(args: dict[str, Any]) -> dict[str, Any]:
        return await admin.prove_login(args)

    return served(
        api.METHODS,
        {
            api.SNAPSHOT: snapshot,
            api.SERIES: series,
            api.STATS: stats,
            api.LIST_HOSTS: list_hosts,
            api.ADD_HOST: add_host,
            api.UPDATE_HOST: update_host,
            api.REMOVE_HOST: remove_host,
            api.CHECK_HOST: check_host,
            api.PROVE_LOGIN: prove_login,
        },
    )


# The monitor runs on timers; the queues every replica has of its own are below.
EVENT_HANDLERS: dict[tuple[str, str, str], EventHandler] = {}

INVENTORY_CHANGES = ("host.added", "host.updated", "host.removed")


def replica_handlers(admin: HostsAdmin, view: FleetView) -> dict[str, EventHandler]:
    """Routing key -> handler of the monitor's own events, on transient queues per replica."""

    async def inventory_changed(envelope: Envelope) -> None:
        host = envelope.data["host"]
        await admin.refresh(host if isinstance(host, str) else host["name"])

    return {
        **{event_type: inventory_changed for event_type in INVENTORY_CHANGES},
        **{event_type: view.on_event for event_type in TRANSITIONS},
    }
