"""What the reservations service answers: its RPC methods (declared in `api.py`, beside
`health`), the accounts' (`services.accounts.handlers`), and the events it consumes, each
mapped to the code that does it.
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable
from datetime import timedelta

from services.accounts.handlers import rpc_methods as account_methods
from services.accounts.ldap_directory import LdapDirectory
from services.reservations import api
from services.reservations.booking.activity import ActivityBoard
from services.reservations.booking.calls import BookingCalls
from services.reservations.booking.changes import Changes
from services.reservations.booking.gpu_health_watch import GpuHealthWatch
from services.reservations.booking.gpu_inventory import GpuInventory
from services.reservations.booking.queries import Queries
from services.reservations.idle.calls import IdleCalls
from services.reservations.idle.watch import IdleWatch
from services.reservations.maintenance.calls import MaintenanceCalls
from services.reservations.store import Store
from services.reservations.usage import report as usage
from services.shared.bus import Bus, EventHandler, RpcHandler, Teardown
from services.shared.contracts import Envelope
from services.shared.rpc import served
from services.shared.usage_report import report_handler

IDLE = timedelta(minutes=1)


def rpc_methods(
    store: Store,
    changes: Changes,
    queries: Queries,
    activity: ActivityBoard | None = None,
    directory: LdapDirectory | None = None,
    watch: IdleWatch | None = None,
) -> dict[str, RpcHandler]:
    if watch is None:  # no loop: answers only (a random secret: no link it did not sign)
        watch = IdleWatch(
            store, changes, None, secret=secrets.token_hex(32), link_base="", stale_after=IDLE
        )
    idle = IdleCalls(store, changes, watch)
    bookings = BookingCalls(changes, queries, activity)
    maintenance = MaintenanceCalls(store, changes, queries)
    # The accounts' methods too: the accounts live in this process and database.
    accounts = account_methods(store, changes, directory)
    return accounts | served(
        api.METHODS,
        {
            api.IDLE_NOTICES: idle.notices,
            api.KEEP_RESERVATION: idle.keep,
            api.RELEASE_RESERVATION: idle.release,
            api.IDLE_LINK: idle.link,
            api.ANSWER_IDLE_LINK: idle.answer_link,
            api.IDLE_STATS: idle.stats,
            api.LIST_GPUS: bookings.list_gpus,
            api.LIST_RULES: bookings.list_rules,
            api.CREATE_RULE: bookings.create_rule,
            api.UPDATE_RULE: bookings.update_rule,
            api.DELETE_RULE: bookings.delete_rule,
            api.CREATE_RESERVATION: bookings.create_reservation,
            api.GET_RESERVATION: bookings.get_reservation,
            api.UPDATE_RESERVATION: bookings.update_reservation,
            api.CANCEL_RESERVATION: bookings.cancel_reservation,
            api.END_RESERVATION: bookings.end_reservation,
            api.CALENDAR: bookings.calendar,
            api.OVERVIEW: bookings.overview,
            api.FIND_SLOT: bookings.find_slot,
            api.ACTIVE_RESERVATIONS: bookings.active_reservations,
            api.CHECK_USE: bookings.check_use,
            api.USAGE_REPORT: report_handler(store, usage.usage_report),
            api.CREATE_MAINTENANCE: maintenance.create,
            api.LIST_MAINTENANCE: maintenance.list,
            api.END_MAINTENANCE: maintenance.end,
        },
    )


def event_handlers(
    store: Store,
    on_host_sampled: Callable[[Envelope], Awaitable[None]],
    health: GpuHealthWatch | None = None,
) -> dict[tuple[str, str, str], EventHandler]:
    inventory = GpuInventory(store)
    health = health or GpuHealthWatch(store)
    return {
        ("monitor", "gpu.discovered", "gpu_discovered"): inventory.discovered,
        ("monitor", "gpu.disappeared", "gpu_disappeared"): inventory.disappeared,
        ("monitor", "gpu.health_changed", "gpu_health"): health.changed,
        ("monitor", "host.sampled", "usage"): on_host_sampled,
    }


async def follow_activity(bus: Bus, activity: ActivityBoard) -> list[Teardown]:
    """What runs on the GPUs now, into `activity`: every replica needs every snapshot (it
    answers bookings from its own memory), so each binds transient queues of its own."""

    async def processes_observed(envelope: Envelope) -> None:
        activity.on_processes_observed(envelope.data)

    async def host_sampled(envelope: Envelope) -> None:
        activity.on_host_sampled(envelope.data)

    own = secrets.token_hex(4)
    return [
        await bus.subscribe(
            "monitor", event, f"reservations.activity-{own}", handler, transient=True
        )
        for event, handler in (
            ("processes.observed", processes_observed),
            ("host.sampled", host_sampled),
        )
    ]
