"""Running services: one alone against RabbitMQ, or all five in one process on the in-process bus.

Each service package has `service.py` with `async def start(ctx) -> Teardown`: its composition
root, which builds its adapters from `ctx.settings`, serves its RPC methods and subscribes its
event handlers, and returns the teardown that undoes all of it. Nothing connects at import.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import importlib
import logging
import os
import signal
import threading
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import text

from services import SERVICE_NAMES, __version__
from services.shared.bus import Bus, BusSettings, EventHandler, RpcHandler, Teardown
from services.shared.bus.amqp import AmqpBus
from services.shared.bus.inproc import InProcessBus
from services.shared.bus.metered import MeteredBus
from services.shared.cluster.replicas import Replicas, new_replica_id
from services.shared.config import Settings
from services.shared.contracts import HEALTH_METHOD, utc_now_iso
from services.shared.errors import ServiceUnavailable
from services.shared.failures import database_unreachable, describe_failure
from services.shared.metrics import Sample
from services.shared.metrics.http import serve_metrics
from services.shared.storage.db import (
    SERVICES_WITH_DATABASE,
    create_engine,
    ensure_migrated,
    unusable,
)

log = logging.getLogger("warden.runtime")

# Backends start before the gateway and stop after it.
START_ORDER = ("reservations", "monitor", "violations", "jobs", "gateway")
# How long start-up keeps retrying a broker or a database it cannot reach (`warden run
# --connect-wait`).
CONNECT_WAIT_S = 30.0


@dataclass(frozen=True)
class ServiceContext:
    name: str
    settings: Settings
    bus: Bus  # __post_init__ wraps it in a MeteredBus of this replica's (`metered`)
    # The engines `open_database` opened: `health` checks that they answer.
    databases: list[Any] = field(default_factory=list)
    # This replica's heartbeat and its view of other replicas; a service sets its `role` and
    # `details` and may `watch` services before `start_service` starts the heartbeat.
    replicas: Replicas = field(init=False)

    @property
    def metered(self) -> MeteredBus:
        """`bus`, as it counts for this replica's metrics: scrape-time probes go here."""
        assert isinstance(self.bus, MeteredBus)
        return self.bus

    def __post_init__(self) -> None:
        # The service sees the bus through a counter of its own (the metrics' labels).
        replica_id = new_replica_id(self.name)
        bus = (
            self.bus
            if isinstance(self.bus, MeteredBus)
            else MeteredBus(self.bus, self.name, replica_id)
        )
        object.__setattr__(self, "bus", bus)
        object.__setattr__(
            self,
            "replicas",
            Replicas(
                bus,
                self.name,
                heartbeat_s=self.settings.replicas.heartbeat_s,
                dead_after_s=self.settings.replicas.dead_after_s,
                replica_id=bus.replica,
            ),
        )


Start = Callable[[ServiceContext], Awaitable[Teardown]]


def service_entry(name: str) -> Start:
    if name not in SERVICE_NAMES:
        raise ValueError(f"unknown service {name!r} (known: {', '.join(SERVICE_NAMES)})")
    module = importlib.import_module(f"services.{name}.service")
    start: Start = module.start
    return start


# How long `health` waits for the service's database to answer `SELECT 1`.
DATABASE_CHECK_S = 2.0


async def _database_problem(engine: Any) -> str | None:
    try:
        async with asyncio.timeout(DATABASE_CHECK_S), engine.connect() as conn:
            await conn.execute(text("SELECT 1"))
    except Exception as err:
        return describe_failure(err)
    return None


def health_handler(ctx: ServiceContext) -> RpcHandler:
    started_at = utc_now_iso()

    async def health(_args: dict[str, Any]) -> dict[str, Any]:
        problems = [p for p in [await _database_problem(e) for e in ctx.databases] if p]
        answer = {
            "service": ctx.name,
            "status": "error" if problems else "ok",
            "version": __version__,
            "pid": os.getpid(),
            "started_at": started_at,
            "replica": ctx.replicas.replica_id,
            "role": ctx.replicas.role(),
        }
        if problems:
            answer["detail"] = "; ".join(problems)
        return answer

    return health


async def start_service(
    ctx: ServiceContext,
    stack: AsyncExitStack,
    methods: Mapping[str, RpcHandler],
    event_handlers: Mapping[tuple[str, str, str], EventHandler] | None = None,
) -> Teardown:
    """What every service does last: subscribe its handlers, serve its RPC, return one teardown.

    `stack` holds what the service set up before (its adapters); `event_handlers` maps
    (source service, routing pattern, handler name) to a handler, each on its own queue.
    """
    for (source, pattern, handler_name), handler in (event_handlers or {}).items():
        stack.push_async_callback(
            await ctx.bus.subscribe(source, pattern, f"{ctx.name}.{handler_name}", handler)
        )
    stop_serving = await ctx.bus.serve(ctx.name, {HEALTH_METHOD: health_handler(ctx), **methods})
    stack.push_async_callback(stop_serving)
    stack.push_async_callback(ctx.metered.add_probe(lambda: _replica_samples(ctx)))
    stack.push_async_callback(ctx.metered.add_probe(ctx.metered.queue_samples))
    ctx.replicas.start()
    stack.push_async_callback(ctx.replicas.stop)  # first to run: peers hear `stopping` at once
    log.info("%s service started", ctx.name, extra={"fields": {"version": __version__}})
    return stack.aclose


async def _replica_samples(ctx: ServiceContext) -> list[Sample]:
    """Role and leadership of this replica (`ctx.replicas.role()`, asked at each scrape)."""
    role = ctx.replicas.role()
    return [
        ("warden_replica_leader", {}, 1.0 if role == "leader" else 0.0),
        ("warden_replica_info", {"role": role, "version": __version__}, 1.0),
    ]


async def open_database(ctx: ServiceContext, stack: AsyncExitStack) -> Any:
    """The service's own engine, checked to be migrated; disposed by `stack`."""
    assert ctx.name in SERVICES_WITH_DATABASE
    engine = create_engine(ctx.settings.storage.database_url_for(ctx.name))
    stack.push_async_callback(engine.dispose)
    await ensure_migrated(engine, ctx.name)
    ctx.databases.append(engine)
    return engine


def make_bus(settings: Settings, kind: str, *, name: str) -> Bus:
    bus_settings = BusSettings(
        max_deliveries=settings.bus.max_deliveries,
        prefetch=settings.bus.prefetch,
        rpc_timeout_s=settings.bus.rpc_timeout_s,
        connect_timeout_s=settings.bus.connect_timeout_s,
    )
    if kind == "inproc":
        return InProcessBus(bus_settings)
    if kind == "amqp":
        return AmqpBus(settings.bus.amqp_url, bus_settings, name=name)
    raise ValueError(f"unknown bus {kind!r}")


@contextlib.contextmanager
def _quiet_loggers(*names: str) -> Iterator[None]:
    loggers = [logging.getLogger(name) for name in names]
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for logger, level in zip(loggers, levels, strict=True):
            logger.setLevel(level)


async def _connect(bus: Bus, wait_s: float, stop: asyncio.Event) -> bool:
    """Connect, waiting up to `wait_s` for a broker that is still starting (one log line).

    Returns False when `stop` was set while waiting.
    """
    deadline = time.monotonic() + wait_s
    delay, warned = 0.5, False
    while not stop.is_set():
        try:
            # aiormq logs an error for every refused attempt; ours says it once.
            with _quiet_loggers("aiormq", "aio_pika"):
                # Bounded by its own timeout; cancelled at once by SIGTERM (it closes what
                # it opened).
                attempt = asyncio.ensure_future(bus.start())
                if not await _until_stopped(attempt, stop):
                    return False
            return True
        except ServiceUnavailable as err:
            if time.monotonic() + delay > deadline:
                raise
            if not warned:
                log.warning("%s; retrying for up to %gs", err.message, wait_s)
                warned = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # (3.11's wait_for can swallow a cancel)
                    await stop.wait()
            delay = min(delay * 2, 5.0)
    return False


async def _until_stopped(task: asyncio.Future[Any], stop: asyncio.Event) -> bool:
    """Await `task` unless `stop` is set first (SIGINT/SIGTERM): then cancel it and return
    False."""
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopping.cancel()
    if task.done():
        task.result()  # its error, if any
        return True
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task
    return False


async def _start_with_retries(
    name: str, ctx: ServiceContext, wait_s: float, stop: asyncio.Event
) -> Teardown | None:
    """Start a service; while its database cannot be reached, try again for up to `wait_s`
    (one log line), then fail with a clear error. None when `stop` was set meanwhile."""
    deadline = time.monotonic() + wait_s
    delay, warned = 0.5, False
    start = service_entry(name)
    while not stop.is_set():
        attempt = asyncio.ensure_future(start(ctx))
        try:
            if not await _until_stopped(attempt, stop):
                return None
            return attempt.result()
        except Exception as err:
            if not database_unreachable(err):
                # Refused for good (no such database, user or password): one line, no retry.
                refused = None
                if name in SERVICES_WITH_DATABASE:
                    refused = unusable(name, ctx.settings.storage.database_url_for(name), err)
                if refused is None:
                    raise
                raise refused from err
            reason = f"{name}: {describe_failure(err)}"
            if time.monotonic() + delay > deadline:
                raise ServiceUnavailable(
                    f"{reason} (after {wait_s:g}s of retries); check storage.database_url "
                    "and that the database server runs"
                ) from err
            if not warned:
                log.warning("%s; retrying for up to %gs", reason, wait_s)
                warned = True
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):  # (3.11's wait_for can swallow a cancel)
                    await stop.wait()
            delay = min(delay * 2, 5.0)
    return None


# Collections of the youngest objects every this many allocations (Python's default is 700),
# of the middle generation after 10 of those, of everything after 100 of these. Bigger young
# and middle generations made fewer collections but longer pauses: at (50,000, 20) a middle
# collection over a heap growing by ~1,500 reservations a second took up to 316 ms, stopping
# every request in flight (CHANGELOG.md, "REST API under load").
GC_THRESHOLDS = (10_000, 10, 100)


def settle_garbage_collector() -> None:
    """Once the services have started: what they loaded lives as long as the process, so the
    collector leaves it alone (`gc.freeze`), and it runs less often. Full collections over the
    services' caches (the reservations' in-memory model, the gateway's calendar copy) took
    tens of milliseconds at random moments: most of the p99 of reads (CHANGELOG.md, performance)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


async def run_services(
    names: Sequence[str],
    settings: Settings,
    *,
    bus_kind: str,
    stop: asyncio.Event | None = None,
    connect_wait_s: float = CONNECT_WAIT_S,
    bus: Bus | None = None,
) -> None:
    """Start `names`, run until `stop` is set (or SIGINT/SIGTERM), then stop them in reverse.

    `bus`, when given, is used instead of a new one of `bus_kind` (and closed at the end).
    """
    ordered = [name for name in START_ORDER if name in names]
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    # Signals reach the main thread only; elsewhere (an embedding test or tool) `stop` rules.
    signals = (
        (signal.SIGINT, signal.SIGTERM)
        if threading.current_thread() is threading.main_thread()
        else ()
    )
    for sig in signals:
        loop.add_signal_handler(sig, stop.set)
    bus = bus or make_bus(settings, bus_kind, name=f"warden-{'+'.join(ordered)}-{os.getpid()}")
    teardowns: list[Teardown] = []
    try:
        if settings.metrics.port:
            stop_metrics, port = await serve_metrics(settings.metrics.host, settings.metrics.port)
            teardowns.append(stop_metrics)
            log.info("metrics on http://%s:%d/metrics", settings.metrics.host, port)
        if not await _connect(bus, connect_wait_s, stop):
            return
        for name in ordered:
            context = ServiceContext(name, settings, bus)
            teardown = await _start_with_retries(name, context, connect_wait_s, stop)
            if teardown is None:
                return
            teardowns.append(teardown)
        settle_garbage_collector()
        await stop.wait()
        log.info("stopping %s", ", ".join(ordered))
    finally:
        for teardown in reversed(teardowns):
            try:
                await teardown()
            except Exception:
                log.exception("error while stopping a service")
        await bus.close()
        for sig in signals:
            loop.remove_signal_handler(sig)
