"""Composition root of the jobs service: one leader acts, other replicas stand by
(services/shared/cluster/leadership.py)."""

from __future__ import annotations

import asyncio
import logging
from contextlib import AsyncExitStack

from services.jobs import api, usage_report
from services.jobs.calls import JobCalls
from services.jobs.engine import Engine
from services.jobs.handlers import event_handlers, rpc_methods
from services.jobs.runner import TaskRunner
from services.jobs.supervisor import TaskSupervisor
from services.jobs.tables import leader_lease, outbox
from services.jobs.working_state import WorkingState
from services.monitor import api as monitor_api
from services.reservations import api as reservations_api
from services.reservations.api import fetch_calendar
from services.shared.bus import RpcHandler, Teardown
from services.shared.cluster.background import cancel_and_wait
from services.shared.cluster.host_directory import HostDirectory
from services.shared.cluster.leadership import Leadership, elect, rpc_table, serve_office
from services.shared.cluster.topology_book import TopologyBook
from services.shared.errors import ServiceUnavailable
from services.shared.rpc import served
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.storage.outbox import Relay
from services.shared.storage.store import Store
from services.shared.usage_report import report_handler

log = logging.getLogger("warden.jobs")


async def load_reservations(engine: Engine) -> None:
    found, gpus = await fetch_calendar(engine.bus, log)
    await engine.load_reservations(found, gpus)
    try:  # the maintenance windows: events keep them from here
        await engine.load_maintenance(await reservations_api.LIST_MAINTENANCE.call(engine.bus, {}))
    except ServiceUnavailable as err:
        log.warning("maintenance windows not loaded (%s): only those announced from now", err)
    log.info(
        "%d reservations and %d GPUs loaded", len(engine.working.book), len(engine.working.gpus)
    )


async def start(ctx: ServiceContext) -> Teardown:
    """Every replica serves RPC (usage reports here, the rest forwarded to the leader) and
    stands by; the one holding the lease sets up the office: the working state, the engine
    (its timers and queue passes), the task supervisor, the outbox relay, the consumers."""
    stack = AsyncExitStack()
    try:
        store = Store(await open_database(ctx, stack))
        # The hosts jobs may run on: [[hosts]] until the monitor's inventory answers, then it.
        hosts = HostDirectory(ctx.settings.hosts, bus=ctx.bus, list_hosts=monitor_api.LIST_HOSTS)
        topologies = TopologyBook()  # each host's GPU interconnect: placement, CPU affinity
        serving: dict[str, RpcHandler] = {}  # the office's methods while it is set up

        async def on_elected(office: AsyncExitStack) -> None:
            office.callback(serving.clear)  # runs last: RPC is answered until the end
            relay = Relay(store, ctx.bus, outbox)
            runner = TaskRunner(ctx.settings)
            office.push_async_callback(runner.close)
            # One working state and its lock, shared by the engine, the RPC calls and the
            # supervisor.
            working = WorkingState(store, ctx.settings, on_commit=relay.kick, hosts=hosts)
            working.topologies = topologies

            def host_added(_names: object) -> None:
                working.kick()  # a host added: the queue may go

            hosts.listeners.append(host_added)
            office.callback(hosts.listeners.remove, host_added)
            supervisor = TaskSupervisor(working, runner)
            engine = Engine(working, supervisor, ctx.bus)
            calls = JobCalls(working, supervisor, ctx.bus)
            await working.load()
            await relay.start()
            office.push_async_callback(relay.stop)  # after the engine: its last events
            office.push_async_callback(supervisor.stop)  # after the engine's loop (SSH work)
            await engine.start()
            office.push_async_callback(engine.stop)
            loading = asyncio.create_task(load_reservations(engine))
            office.push_async_callback(cancel_and_wait, loading)
            serving.update(rpc_methods(calls, store))
            if not leadership.solo:
                await serve_office(ctx.bus, ctx.name, office, dict(serving))
            for (source, pattern, name), handler in event_handlers(engine).items():
                office.push_async_callback(
                    await ctx.bus.subscribe(source, pattern, f"{ctx.name}.{name}", handler)
                )

        leadership = elect(ctx, store, leader_lease, on_elected)
        await hosts.start(ctx.name)
        stack.push_async_callback(hosts.stop)
        stack.push_async_callback(await topologies.follow(ctx.bus, ctx.name))
        # The leader (the only replica with SQLite) has its consumers subscribed before the
        # service answers `health`, as a service always had; a standby just stands by.
        try:
            await leadership.start()
            teardown = await start_service(
                ctx, stack, rpc_table_for(ctx, store, leadership, serving)
            )
        except BaseException:
            await leadership.stop()
            raise
        stack.push_async_callback(leadership.stop)  # first: the office goes before the RPC
        return teardown
    except BaseException:
        await stack.aclose()
        raise


def rpc_table_for(
    ctx: ServiceContext,
    store: Store,
    leadership: Leadership,
    serving: dict[str, RpcHandler],
) -> dict[str, RpcHandler]:
    """Usage reports (read from the database) answered by any replica; the rest, which read
    or change the working state, by the leader's office."""
    return rpc_table(
        ctx.bus,
        ctx.name,
        leadership,
        # `served` loads the arguments by the method's schema, as every handler gets them.
        local=served(
            [api.USAGE_REPORT],
            {api.USAGE_REPORT: report_handler(store, usage_report.usage_report)},
        ),
        office=lambda: serving or None,
        names={m.name: m.timeout_s for m in api.METHODS},
    )
