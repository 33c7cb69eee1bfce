"""Composition root of the violations service: one leader acts, other replicas stand by
(services/shared/cluster/leadership.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack

from sqlalchemy.exc import IntegrityError

from services.monitor import api as monitor_api
from services.notifications.serving import Notifications
from services.reservations.api import fetch_calendar
from services.shared.bus import Bus, RpcHandler, Teardown
from services.shared.cluster.host_directory import HostDirectory
from services.shared.cluster.leadership import Leadership, elect, rpc_table, serve_office
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.storage.outbox import Relay
from services.shared.storage.store import Store
from services.violations import api, repository
from services.violations.actions.mail import MailSender
from services.violations.actions.remote import SshHostShell
from services.violations.actions.webhook import WebhookSender
from services.violations.handlers import LOCAL_METHODS, event_handlers, rpc_methods
from services.violations.responders import Claim, DeliveryNow, Responders
from services.violations.tables import leader_lease, outbox
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
    ctx: ServiceContext,
    stack: AsyncExitStack,
    hosts: HostDirectory,
    claim: Claim | None = None,
    delivery: DeliveryNow | None = None,
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
        claim=claim,
        delivery=delivery,
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


def step_claimer(store: Store, holder: str) -> Claim:
    """Claims a handler's step before it acts (fenced like every write of the leader)."""

    async def claim(incident_id: str, step_index: int, handler: str) -> bool:
        try:
            async with store.write() as conn:
                await repository.claim_step(conn, incident_id, step_index, handler, holder)
        except IntegrityError:
            return False
        return True

    return claim


async def start(ctx: ServiceContext) -> Teardown:
    """Every replica serves RPC (reads here, the rest forwarded to the leader) and stands
    by; the one holding the lease sets up the office: the tracker and its escalation timer,
    the outbox relay, the notifications, the event consumers and the built-in handlers."""
    stack = AsyncExitStack()
    try:
        store = Store(await open_database(ctx, stack))
        # The hosts and their labels: [[hosts]] until the monitor's inventory answers, then it.
        hosts = HostDirectory(ctx.settings.hosts, bus=ctx.bus, list_hosts=monitor_api.LIST_HOSTS)
        await hosts.start(ctx.name)
        stack.push_async_callback(hosts.stop)
        serving: dict[str, RpcHandler] = {}  # the office's methods while it is set up

        async def on_elected(office: AsyncExitStack) -> None:
            office.callback(serving.clear)  # runs last: RPC is answered until the end
            relay = Relay(store, ctx.bus, outbox)
            tracker = Tracker(
                store, ctx.settings.violations, on_commit=relay.kick, labels_of=hosts.labels
            )
            await tracker.load()
            await relay.start()
            office.push_async_callback(relay.stop)  # after the tracker: its last events
            await tracker.start()
            office.push_async_callback(tracker.stop)
            notifications = Notifications(
                ctx.bus, store, ctx.settings, relay.kick, outbox, labels_of=hosts.labels
            )
            await notifications.start(office)
            loading = asyncio.create_task(load_reservations(ctx.bus, tracker, notifications))
            # Usually the reservations service answers at once; if it does not, snapshots are
            # skipped (see Tracker.on_processes) until it does, while escalation goes on.
            await asyncio.wait({loading}, timeout=RESERVATIONS_WAIT_S)

            async def stop_loading() -> None:
                loading.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await loading

            office.push_async_callback(stop_loading)
            serving.update(rpc_methods(store, tracker, notifications.rpc()))
            if not leadership.solo:
                await serve_office(ctx.bus, ctx.name, office, dict(serving))
            handlers = {**event_handlers(tracker), **notifications.events()}
            for (source, pattern, name), handler in handlers.items():
                office.push_async_callback(
                    await ctx.bus.subscribe(source, pattern, f"{ctx.name}.{name}", handler)
                )
            claim = step_claimer(store, ctx.replicas.replica_id)

            async def responders_once_served() -> None:
                await rpc_served.wait()  # they call this service's RPC
                await start_responders(ctx, office, hosts, claim, notifications.delivery.current)

            starting = asyncio.create_task(responders_once_served())

            async def stop_starting() -> None:
                starting.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await starting

            office.push_async_callback(stop_starting)

        leadership = elect(ctx, store, leader_lease, on_elected)
        # The leader (the only replica with SQLite) has its consumers subscribed before the
        # service answers `health`, as a service always had; a standby just stands by.
        rpc_served = asyncio.Event()
        try:
            await leadership.start()
            teardown = await start_service(
                ctx, stack, rpc_table_for(ctx, store, leadership, serving)
            )
        except BaseException:
            await leadership.stop()
            raise
        stack.push_async_callback(leadership.stop)  # first: the office goes before the RPC
        rpc_served.set()
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
    """Reads of the database answered by any replica; the rest by the leader's office."""
    # Read handlers use only the store: a tracker and a notification path that never start
    # are enough to build them here, on a standby.
    idle = Notifications(ctx.bus, store, ctx.settings, lambda: None, outbox)
    readers = rpc_methods(store, Tracker(store, ctx.settings.violations), idle.rpc())
    return rpc_table(
        ctx.bus,
        ctx.name,
        leadership,
        local={name: readers[name] for name in LOCAL_METHODS},
        office=lambda: serving or None,
        names={m.name: m.timeout_s for m in api.METHODS},
    )
