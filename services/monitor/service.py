"""Composition root of the monitor: readers for every host, the poll loops, the metrics store."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack
from datetime import UTC, datetime
from typing import Any

from services.monitor.handlers import EVENT_HANDLERS, rpc_methods
from services.monitor.inventory import monitored_hosts
from services.monitor.monitor import Monitor
from services.monitor.nvml import load_nvml
from services.monitor.readers import HostReader, LocalNvmlReader, SshReader
from services.monitor.tsdb.base import MetricsStore
from services.monitor.tsdb.influx import InfluxMetricsStore
from services.monitor.tsdb.sqlite import SqlMetricsStore
from services.monitor.writer import MetricsWriter
from services.shared.bus import Teardown
from services.shared.config import MonitorSettings, Settings
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.ssh import SshHostShell, SshOptions

log = logging.getLogger("warden.monitor")

PRUNE_EVERY_S = 600.0


def build_readers(settings: Settings, nvml: Any | None) -> list[HostReader]:
    options = SshOptions.from_settings(settings.ssh)
    readers: list[HostReader] = []
    for host in monitored_hosts(settings, local_has_nvml=nvml is not None):
        if host.probe == "nvml":
            readers.append(LocalNvmlReader(host.name, nvml))
        else:
            readers.append(SshReader(SshHostShell(host, options)))
    return readers


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

        settings = ctx.settings.monitor
        monitor = Monitor(
            build_readers(ctx.settings, nvml),
            publish,
            interval_s=settings.interval_s,
            poll_deadline_s=settings.poll_deadline_s,
            writer=MetricsWriter(store),
        )
        await monitor.start()
        stack.push_async_callback(monitor.stop)  # stops polling, flushes the writer
        pruner = asyncio.create_task(_prune_forever(store), name="prune metrics")
        stack.callback(pruner.cancel)
        return await start_service(ctx, stack, rpc_methods(monitor, store), EVENT_HANDLERS)
    except BaseException:
        await stack.aclose()
        raise
