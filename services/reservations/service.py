"""Composition root of the reservations service."""

from __future__ import annotations

import secrets
from contextlib import AsyncExitStack
from datetime import timedelta

from services.accounts.ldap_directory import LdapDirectory
from services.monitor import api as monitor_api
from services.reservations.booking.activity import ActivityBoard
from services.reservations.booking.changes import Changes
from services.reservations.booking.gpu_health_watch import GpuHealthWatch
from services.reservations.booking.lifecycle import TICK_S as lifecycle_tick_s
from services.reservations.booking.lifecycle import Lifecycle, UsageTracker
from services.reservations.booking.queries import Queries
from services.reservations.handlers import event_handlers, follow_activity, rpc_methods
from services.reservations.idle.watch import NOTIFY_RETRY, IdleWatch
from services.reservations.idle.watch import REFRESH_S as idle_refresh_s
from services.reservations.rules.refusals import DurationBounds
from services.reservations.store import Store, now_ms
from services.reservations.tables import outbox
from services.shared.bus import Teardown
from services.shared.cluster.host_directory import HostDirectory
from services.shared.cluster.topology_book import TopologyBook
from services.shared.runtime import ServiceContext, open_database, start_service
from services.shared.storage.outbox import Relay

# The longest an event waits for the next flush after another flush began (outbox.Relay).
RELAY_GAP_S = 0.01


async def start(ctx: ServiceContext, *, idle_notify_retry: timedelta = NOTIFY_RETRY) -> Teardown:
    """`idle_notify_retry`: after an idle notice's message failed, when it is tried again."""
    stack = AsyncExitStack()
    try:
        store = Store(await open_database(ctx, stack))
        settings = ctx.settings.reservations
        # Creates commit one after the other at one client: their events share flushes.
        relay = Relay(store, ctx.bus, outbox, min_gap_s=RELAY_GAP_S)
        poll = timedelta(seconds=ctx.settings.monitor.interval_s)
        activity = ActivityBoard(
            # Three polls missed: the host's picture is no longer "now".
            stale_after=3 * poll + timedelta(seconds=ctx.settings.monitor.poll_deadline_s),
            # find_slot starts at the next whole minute: that is "now" too.
            now_window=max(poll, timedelta(minutes=1)),
            allow=ctx.settings.violations.allow,
        )

        def on_commit() -> None:
            relay.kick()
            lifecycle.kick()
            usage.invalidate()
            watch.invalidate()  # a new or changed booking: looked up at the next check

        def on_created(earliest_start_ms: int) -> None:
            # New bookings only: one that starts later than what each timer looks at is
            # picked up by its own next look, so only the outbox is woken for it.
            relay.kick()
            soon_ms = earliest_start_ms - now_ms()
            if soon_ms <= lifecycle_tick_s * 1000:  # reservation.started at once, as before
                lifecycle.kick()
            if soon_ms <= usage.margin_ms:
                usage.invalidate()
            if soon_ms <= idle_refresh_s * 1000:
                watch.invalidate()

        # Which hosts are in the monitor's inventory: a removed host's GPUs take no new booking.
        hosts = HostDirectory(ctx.settings.hosts, bus=ctx.bus, list_hosts=monitor_api.LIST_HOSTS)
        changes = Changes(
            store,
            DurationBounds(
                shortest=timedelta(minutes=settings.min_duration_min),
                longest=timedelta(hours=settings.max_duration_h),
            ),
            on_commit=on_commit,
            on_created=on_created,
            host_offered=hosts.offers,
        )
        reads = changes.creates.memory.reads  # one directory for the creates and the reads
        gateway = ctx.settings.gateway
        watch = IdleWatch(
            store,
            changes,
            ctx.bus,
            secret=ctx.settings.auth.jwt_secret or secrets.token_hex(32),
            link_base=gateway.public_url or f"http://{gateway.host}:{gateway.port}",
            # No action on figures older than three polls: the host's picture is not "now".
            stale_after=3 * poll + timedelta(seconds=ctx.settings.monitor.poll_deadline_s),
            directory=reads,
            notify_retry=idle_notify_retry,
        )
        # Each reservation's figures of each sample go to the idle watch.
        usage = UsageTracker(store, settings.idle_below_percent, on_figures=watch.on_figures)
        lifecycle = Lifecycle(store, usage, on_commit=relay.kick)
        await relay.start()
        stack.push_async_callback(relay.stop)  # after the lifecycle: publishes its last events
        stack.push_async_callback(changes.creates.writer.close)  # the last group commits first
        await lifecycle.start()
        stack.push_async_callback(lifecycle.stop)
        await watch.start()
        stack.push_async_callback(watch.stop)
        await hosts.start(ctx.name)
        stack.push_async_callback(hosts.stop)
        for teardown in await follow_activity(ctx.bus, activity):
            stack.push_async_callback(teardown)
        topologies = TopologyBook()  # each host's GPU interconnect, for the earliest slot
        stack.push_async_callback(await topologies.follow(ctx.bus, ctx.name))
        ldap = ctx.settings.auth.ldap
        directory = LdapDirectory(ldap) if ldap.url else None
        queries = Queries(
            store, usage.live, host_offered=hosts.offers, activity=activity, directory=reads
        )
        queries.topologies = topologies
        queries.packing = ctx.settings.scheduling.packing
        return await start_service(
            ctx,
            stack,
            rpc_methods(store, changes, queries, activity, directory, watch),
            event_handlers(store, usage.on_host_sampled, GpuHealthWatch(store, queries, ctx.bus)),
        )
    except BaseException:
        await stack.aclose()
        raise
