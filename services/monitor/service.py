"""Composition root of the monitor: the inventory (seeded from [[hosts]]), readers for every
host, the poll loops of this replica's part of the hosts (`sharding.py`), the metrics store."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

from services.monitor import poll_metrics
from services.monitor.fleet_view import FleetView
from services.monitor.gpu_health import HealthRules
from services.monitor.handlers import EVENT_HANDLERS, replica_handlers, rpc_methods
from services.monitor.health_store import HealthStore
from services.monitor.hosts.host_store import HostStore
from services.monitor.hosts.hosts_admin import HostsAdmin
from services.monitor.hosts.inventory import active, local_host
from services.monitor.monitor import Monitor
from services.monitor.nvml import load_nvml
from services.monitor.peer_probe import vanished
from services.monitor.readers import HostReader, LocalNvmlReader, SshReader
from services.monitor.replica_rpc import Peers, replica_methods, rpc_name
from services.monitor.sharding import Sharding
from services.monitor.standby import Standby
from services.monitor.state import Event
from services.monitor.tsdb.base import MetricsStore
from services.monitor.tsdb.influx import InfluxMetricsStore
from services.monitor.tsdb.sqlite import SqlMetricsStore
from services.monitor.writer import MetricsWriter
from services.shared.bus import Teardown
from services.shared.config import HostConfig, MonitorSettings, Settings
from services.shared.remote.ssh import SshHostShell, SshOptions
from services.shared.runtime import ServiceContext, open_database, start_service

log = logging.getLogger("warden.monitor")

PRUNE_EVERY_S = 600.0
# Standby connections open at this share of `handshakes_per_s` at most: they can wait, polls
# cannot.
STANDBY_SHARE = 1 / 10
RELOAD_EVERY_S = 30.0  # the inventory read again: heals a host.* event this replica missed


def reader_factory(settings: Settings, nvml: Any | None) -> Callable[[HostConfig], HostReader]:
    options = SshOptions.from_settings(settings.ssh)
    handshakes = asyncio.Semaphore(settings.monitor.max_handshakes)

    def reader_for(host: HostConfig) -> HostReader:
        reader: HostReader
        if host.probe == "nvml":
            reader = LocalNvmlReader(host.name, nvml)
        else:
            reader = SshReader(SshHostShell(host, options, handshakes=handshakes))
        reader.config = host
        return reader

    return reader_for


def build_store(monitor: MonitorSettings, engine: Any) -> MetricsStore:
    if monitor.tsdb == "influx":
        return InfluxMetricsStore(
            monitor.influx_url, monitor.influx_token, monitor.influx_org, monitor.influx_bucket
        )
    return SqlMetricsStore(
        engine,
        raw_retention_s=monitor.raw_retention_h * 3600,
        rollup_retention_s=monitor.rollup_retention_d * 86400,
    )


async def _prune_forever(store: MetricsStore) -> None:
    while True:
        await asyncio.sleep(PRUNE_EVERY_S)
        try:
            await store.prune(datetime.now(UTC))
        except Exception:
            log.exception("pruning old metrics failed")


async def _reload_forever(admin: HostsAdmin) -> None:
    while True:
        await asyncio.sleep(RELOAD_EVERY_S)
        try:
            await admin.reload()
        except Exception as err:
            log.warning("reading the inventory again failed: %s", err)


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        engine = await open_database(ctx, stack)
        store = build_store(ctx.settings.monitor, engine)
        await store.start()
        stack.push_async_callback(store.close)
        nvml = await asyncio.to_thread(load_nvml)

        async def publish(event_type: str, data: dict[str, Any]) -> None:
            await ctx.bus.emit(event_type, data, source="monitor")

        async def publish_all(events: list[Event]) -> None:
            await ctx.bus.emit_all(events, source="monitor")

        # The inventory: [[hosts]] seeds the database, which then owns the list.
        host_store = HostStore(engine)
        stored = await host_store.seed(ctx.settings.hosts)
        configured = [row.host for row in stored if not row.removed]
        local = local_host(ctx.settings, configured, local_has_nvml=nvml is not None)
        inventory = {host.name: host for host in active(stored, local)}
        reader_for = reader_factory(ctx.settings, nvml)
        settings = ctx.settings.monitor
        standby = Standby(
            reader_for,
            per_s=settings.handshakes_per_s * STANDBY_SHARE,
            connect_timeout_s=ctx.settings.ssh.connect_timeout_s,
            enabled=settings.standby_connections,
        )
        stack.push_async_callback(standby.close)  # after the monitor's stop, which closes its own
        # Hosts are added by the sharding, once this replica knows which are its own.
        monitor = Monitor(
            [],
            publish,
            interval_s=settings.interval_s,
            poll_deadline_s=settings.poll_deadline_s,
            writer=MetricsWriter(store),
            health_rules=HealthRules.from_names(
                ctx.settings.health.failed,
                ctx.settings.health.degraded,
                ctx.settings.health.healthy_for_s,
            ),
            health_store=HealthStore(engine),
            publish_all=publish_all,
            release=standby.keep,
        )
        replicas, view = ctx.replicas, FleetView()
        peers = Peers(ctx.bus, replicas)

        async def ask_peers(ids: list[str]) -> None:
            for answer in await peers.ask("transitions", {}, only=ids):
                view.load(answer["hosts"])

        own_rpc = rpc_name(replicas.replica_id)
        sharding = Sharding(
            monitor,
            reader_for,
            inventory,
            replicas,
            view,
            # On the in-process bus this replica is the only one: no peers to wait for.
            # (`in_process`, not isinstance: ctx.bus is the MeteredBus around it.)
            settle_s=0.0 if ctx.bus.in_process else replicas.heartbeat_s * 1.5,
            ask_peers=ask_peers,
            handshakes_per_s=ctx.settings.monitor.handshakes_per_s,
            probe=lambda: vanished(ctx.bus, replicas, own_rpc),
            standby=standby,
        )
        replicas.role = sharding.role
        replicas.details = lambda: {**sharding.details(), "rpc": own_rpc}
        admin = HostsAdmin(
            host_store,
            sharding,
            publish,
            SshOptions.from_settings(ctx.settings.ssh),
            inventory,
            local,
        )
        # This replica's own queues: its RPC, other replicas' inventory changes, transitions.
        stack.push_async_callback(
            await ctx.bus.serve(own_rpc, replica_methods(monitor, replicas.replica_id))
        )
        suffix = own_rpc.removeprefix("monitor-")
        for event_type, handler in replica_handlers(admin, view).items():
            stack.push_async_callback(
                await ctx.bus.subscribe(
                    "monitor", event_type, f"monitor.replica-{suffix}", handler, transient=True
                )
            )
        await replicas.watch("monitor")
        stack.push_async_callback(poll_metrics.observe(monitor, ctx))
        await monitor.start()
        stack.push_async_callback(monitor.stop)  # stops polling, flushes the writer
        sharding.start()
        stack.push_async_callback(sharding.stop)
        pruner = asyncio.create_task(_prune_forever(store), name="prune metrics")
        stack.callback(pruner.cancel)
        reloader = asyncio.create_task(_reload_forever(admin), name="reload inventory")
        stack.callback(reloader.cancel)
        handlers = rpc_methods(monitor, store, admin, peers)
        teardown = await start_service(ctx, stack, handlers, EVENT_HANDLERS)
        # First of the teardown: stop polling, then the heartbeat says `stopping` and when.
        stack.push_async_callback(sharding.hand_over)
        return teardown
    except BaseException:
        await stack.aclose()
        raise
