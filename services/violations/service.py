"""Composition root of the violations service."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack

from services.monitor import api as monitor_api
from services.reservations.api import fetch_calendar
from services.shared.bus import Bus, Teardown
from services.shared.host_directory import HostDirectory
from services.shared.outbox import Relay
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.store import Store
from services.violations.actions.mail import MailSender
from services.violations.actions.remote import SshHostShell
from services.violations.actions.webhook import WebhookSender
from services.violations.handlers import event_handlers, rpc_methods
from services.violations.notifications.serving import Notifications
from services.violations.responders import Responders
from services.violations.tables import outbox
from services.violations.tracker import Tracker

log = logging.getLogger("warden.violations")


async def load_reservations(bus: Bus, tracker: Tracker, notifications: Notifications) -> None:
    """Ask the reservations service for current and coming reservations, until it answers."""
    found, gpus = await fetch_calendar(bus, log)
    await tracker.load_reservations(found, gpus)
    notifications.load_reservations(found)
    log.info("%d reservations loaded", len(tracker.book))


# How long start-up waits for the reservations before serving without them.
RESERVATIONS_WAIT_S = 10.0

# Steps of many incidents run at once (a terminate step waits out its grace period).
RESPONDER_CONCURRENCY = 16


async def start_responders(
    ctx: ServiceContext, stack: AsyncExitStack, hosts: HostDirectory
) -> None:
    """One consumer per built-in handler turned on; after the RPC they call is served."""
    settings = ctx.settings.violations
    if not settings.handlers:
        return
    webhooks = WebhookSender.from_settings(settings)
    await webhooks.start()
    stack.push_async_callback(webhooks.close)
    responders = Responders(
        ctx.bus,
        ctx.settings,
        shell=SshHostShell(ctx.settings.ssh),
        mail=MailSender(settings.smtp),
        webhooks=webhooks,
        hosts=hosts,
    )
    for name, consumer in responders.consumers().items():
        stack.push_async_callback(
            await ctx.bus.subscribe(
                "violations",
                "violation.escalated",
                f"violations.{name}",
                consumer,
                concurrency=RESPONDER_CONCURRENCY,
            )
        )


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        store = Store(await open_database(ctx, stack))
        relay = Relay(store, ctx.bus, outbox)
        # The hosts and their labels: [[hosts]] until the monitor's inventory answers, then it.
        hosts = HostDirectory(ctx.settings.hosts, bus=ctx.bus, list_hosts=monitor_api.LIST_HOSTS)
        await hosts.start(ctx.name)
        stack.push_async_callback(hosts.stop)
        tracker = Tracker(
            store, ctx.settings.violations, on_commit=relay.kick, labels_of=hosts.labels
        )
        await tracker.load()
        await relay.start()
        stack.push_async_callback(relay.stop)  # after the tracker: publishes its last events
        await tracker.start()
        stack.push_async_callback(tracker.stop)
        notifications = Notifications(
            ctx.bus, store, ctx.settings, relay.kick, labels_of=hosts.labels
        )
        await notifications.start(stack)
        loading = asyncio.create_task(load_reservations(ctx.bus, tracker, notifications))
        # Usually the reservations service answers at once; if it does not, snapshots are
        # skipped (see Tracker.on_processes) until it does, while escalation goes on.
        await asyncio.wait({loading}, timeout=RESERVATIONS_WAIT_S)

        async def stop_loading() -> None:
            loading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await loading

        stack.push_async_callback(stop_loading)
        teardown = await start_service(
            ctx,
            stack,
            rpc_methods(store, tracker, notifications.rpc()),
            {**event_handlers(tracker), **notifications.events()},
        )
        await start_responders(ctx, stack, hosts)
        return teardown
    except BaseException:
        await stack.aclose()
        raise
