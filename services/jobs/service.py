"""Composition root of the jobs service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack

from services.jobs.commands import JobCommands
from services.jobs.engine import Engine
from services.jobs.handlers import event_handlers, rpc_methods
from services.jobs.runner import TaskRunner
from services.jobs.supervisor import TaskSupervisor
from services.jobs.tables import outbox
from services.jobs.working_state import WorkingState
from services.monitor import api as monitor_api
from services.reservations.api import fetch_calendar
from services.shared.bus import Teardown
from services.shared.host_directory import HostDirectory
from services.shared.outbox import Relay
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.store import Store

log = logging.getLogger("warden.jobs")


async def load_reservations(engine: Engine) -> None:
    found, gpus = await fetch_calendar(engine.bus, log)
    await engine.load_reservations(found, gpus)
    log.info(
        "%d reservations and %d GPUs loaded", len(engine.working.book), len(engine.working.gpus)
    )


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        store = Store(await open_database(ctx, stack))
        relay = Relay(store, ctx.bus, outbox)
        runner = TaskRunner(ctx.settings)
        stack.push_async_callback(runner.close)
        # The hosts jobs may run on: [[hosts]] until the monitor's inventory answers, then it.
        hosts = HostDirectory(ctx.settings.hosts, bus=ctx.bus, list_hosts=monitor_api.LIST_HOSTS)
        # One working state and its lock, shared by the engine, the commands and the supervisor.
        working = WorkingState(store, ctx.settings, on_commit=relay.kick, hosts=hosts)
        hosts.listeners.append(lambda _names: working.kick())  # a host added: the queue may go
        supervisor = TaskSupervisor(working, runner)
        engine = Engine(working, supervisor, ctx.bus)
        commands = JobCommands(working, supervisor, ctx.bus)
        await working.load()
        await relay.start()
        stack.push_async_callback(relay.stop)  # after the engine: publishes its last events
        stack.push_async_callback(supervisor.stop)  # after the engine's loop, which starts SSH work
        await engine.start()
        stack.push_async_callback(engine.stop)
        loading = asyncio.create_task(load_reservations(engine))

        async def stop_loading() -> None:
            loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loading

        stack.push_async_callback(stop_loading)
        await hosts.start(ctx.name)
        stack.push_async_callback(hosts.stop)
        return await start_service(ctx, stack, rpc_methods(commands, store), event_handlers(engine))
    except BaseException:
        await stack.aclose()
        raise
