"""`run_services`: the five services in one process on the in-process bus, or as separate
runtimes (each with its own AmqpBus connection) on RabbitMQ, observed through the gateway's
GET /api/v1/health on a real port.

Each test has its own temp data dir (one migrated SQLite file per service), its own free port
and, on RabbitMQ, its own vhost. Waiting is polling with generous deadlines; nothing asserts
how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import aio_pika
import pytest
from aio_pika.exceptions import ChannelNotFoundEntity

from services import SERVICE_NAMES, __version__
from services.shared.bus.amqp import rpc_queue_name
from services.shared.config import (
    AuthSettings,
    BusConfig,
    GatewaySettings,
    Settings,
    StorageSettings,
)
from services.shared.errors import SchemaNotMigrated
from services.shared.runtime import run_services
from services.shared.storage import db
from tests.support.health import Check, Health, all_ok, health_until, only_down
from tests.support.polling import until
from tests.support.ports import free_port

START_DEADLINE_S = 20.0
STOP_DEADLINE_S = 20.0
BACKENDS = ("monitor", "reservations", "jobs", "violations")


def make_settings(tmp_path: Path, *, amqp_url: str | None = None) -> Settings:
    settings = Settings(
        storage=StorageSettings(data_dir=tmp_path / "data"),
        gateway=GatewaySettings(host="127.0.0.1", port=free_port(), health_timeout_s=2.0),
        auth=AuthSettings(jwt_secret=secrets.token_urlsafe(48)),
        source="test",
    )
    if amqp_url is not None:
        settings = replace(settings, bus=BusConfig(amqp_url=amqp_url, rpc_timeout_s=5.0))
    return settings


async def migrate(settings: Settings, names: tuple[str, ...] = db.SERVICES_WITH_DATABASE) -> None:
    for name in names:
        engine = db.create_engine(settings.storage.database_url_for(name))
        try:
            assert await db.upgrade(engine, name) == db.head_revision(name)
        finally:
            await engine.dispose()


@dataclass
class Runtimes:
    """run_services tasks started by a test; whatever is left is stopped at teardown."""

    settings: Settings
    running: dict[str, tuple[asyncio.Task[None], asyncio.Event]] = field(default_factory=dict)

    def start(self, label: str, names: list[str], bus_kind: str) -> asyncio.Task[None]:
        stop = asyncio.Event()
        task = asyncio.create_task(
            run_services(names, self.settings, bus_kind=bus_kind, stop=stop, connect_wait_s=5),
            name=f"run_services {label}",
        )
        self.running[label] = (task, stop)
        return task

    async def stop(self, label: str) -> None:
        """Ask one runtime to stop and wait until run_services has returned."""
        task, stop = self.running.pop(label)
        stop.set()
        await asyncio.wait_for(task, STOP_DEADLINE_S)  # re-raises what the runtime raised

    def check_alive(self) -> None:
        for label, (task, _stop) in self.running.items():
            if task.done():
                error = task.exception()
                pytest.fail(f"runtime {label!r} ended early: {error!r}")

    async def stop_all(self) -> None:
        for label in list(self.running):
            task, stop = self.running.pop(label)
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, STOP_DEADLINE_S)


@pytest.fixture
async def runtimes() -> AsyncIterator[Callable[[Settings], Runtimes]]:
    made: list[Runtimes] = []

    def factory(settings: Settings) -> Runtimes:
        made.append(Runtimes(settings))
        return made[-1]

    try:
        yield factory
    finally:
        for group in made:
            await group.stop_all()


async def wait_for_health(
    port: int, want: Check, what: str, runtimes: Runtimes, *, deadline_s: float = START_DEADLINE_S
) -> Health:
    return await health_until(port, want, what, deadline_s, alive=runtimes.check_alive)


async def port_is_closed(port: int) -> bool:
    try:
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError:
        return True
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return False


# --- in-process bus ---------------------------------------------------------------------------


async def test_all_five_in_one_process_on_the_inprocess_bus(
    tmp_path: Path, runtimes: Callable[[Settings], Runtimes]
) -> None:
    settings = make_settings(tmp_path)
    await migrate(settings)
    group = runtimes(settings)
    group.start("all", list(SERVICE_NAMES), "inproc")

    def every_replica_heard(status: int, body: dict[str, Any]) -> bool:
        services = body["services"]
        return all_ok(status, body) and all(len(services[n]["replicas"]) == 1 for n in services)

    _status, body = await wait_for_health(
        settings.gateway.port, every_replica_heard, "all five services ok, one replica each", group
    )

    assert body["version"] == __version__
    assert {n: (s["status"], s["version"]) for n, s in body["services"].items()} == {
        n: ("ok", __version__) for n in SERVICE_NAMES
    }
    for name, service in body["services"].items():
        [replica] = service["replicas"]  # `warden run all`: each service is one replica
        assert replica["id"].startswith(f"{name}@")
        assert replica["last_heard_s"] >= 0 and isinstance(replica["details"], dict)
        if "leader" in service:
            assert service["leader"] == replica["id"]
    await group.stop("all")  # a clean shutdown returns
    assert await port_is_closed(settings.gateway.port)


async def test_one_process_stops_on_stop_even_before_anyone_asked_for_health(
    tmp_path: Path, runtimes: Callable[[Settings], Runtimes]
) -> None:
    settings = make_settings(tmp_path)
    await migrate(settings)
    group = runtimes(settings)
    group.start("all", list(SERVICE_NAMES), "inproc")
    await asyncio.sleep(0)  # let it start (or not yet): stop must work either way

    await group.stop("all")

    assert await port_is_closed(settings.gateway.port)


# --- unmigrated schema ------------------------------------------------------------------------


async def test_a_service_refuses_to_start_on_an_unmigrated_schema(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)

    with pytest.raises(SchemaNotMigrated) as refused:
        await asyncio.wait_for(
            run_services(["reservations"], settings, bus_kind="inproc"), STOP_DEADLINE_S
        )

    assert "warden db upgrade" in refused.value.message
    assert "reservations" in refused.value.message
    assert refused.value.details["service"] == "reservations"
    assert refused.value.details["current"] is None


async def test_one_unmigrated_service_stops_the_others_it_started_with(tmp_path: Path) -> None:
    settings = make_settings(tmp_path)
    await migrate(settings, ("monitor", "reservations", "violations"))  # not jobs

    with pytest.raises(SchemaNotMigrated) as refused:
        await asyncio.wait_for(
            run_services(list(SERVICE_NAMES), settings, bus_kind="inproc"), STOP_DEADLINE_S
        )

    assert refused.value.details["service"] == "jobs"
    assert "warden db upgrade" in refused.value.message
    assert await port_is_closed(settings.gateway.port)  # the gateway never came up


# --- stopping while waiting for the broker ---------------------------------------------------


async def test_stop_while_waiting_for_rabbitmq_returns_promptly(tmp_path: Path) -> None:
    settings = make_settings(tmp_path, amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    await migrate(settings, ("jobs",))
    stop = asyncio.Event()
    task = asyncio.create_task(
        run_services(["jobs"], settings, bus_kind="amqp", stop=stop, connect_wait_s=120)
    )
    await asyncio.sleep(1)  # retrying by now (nothing listens on that port)
    assert not task.done()

    stop.set()

    # Returns (no error: it was asked to stop) well within its 120 s of retrying.
    await asyncio.wait_for(task, 10)


# --- RabbitMQ: separate runtimes --------------------------------------------------------------


@pytest.mark.amqp
async def test_separate_runtimes_on_rabbitmq_and_one_backend_going_away(
    tmp_path: Path, amqp_url: str, runtimes: Callable[[Settings], Runtimes]
) -> None:
    settings = make_settings(tmp_path, amqp_url=amqp_url)
    await migrate(settings)
    group = runtimes(settings)
    for name in BACKENDS:
        group.start(name, [name], "amqp")
    group.start("gateway", ["gateway"], "amqp")

    await wait_for_health(settings.gateway.port, all_ok, "all five services ok", group)

    await group.stop("jobs")
    _status, body = await wait_for_health(
        settings.gateway.port, only_down("jobs"), "jobs unreachable, the others ok", group
    )
    assert body["services"]["jobs"]["version"] is None

    # It comes back: a new runtime for jobs is seen again.
    group.start("jobs", ["jobs"], "amqp")
    await wait_for_health(settings.gateway.port, all_ok, "jobs back", group)

    await group.stop("gateway")
    assert await port_is_closed(settings.gateway.port)
    for name in BACKENDS:
        await group.stop(name)


async def rpc_consumers(amqp_url: str, service: str) -> int:
    """How many replicas consume the service's RPC queue right now (0: no queue)."""
    connection = await aio_pika.connect(amqp_url)
    async with connection:
        channel = await connection.channel()
        try:
            queue = await channel.declare_queue(rpc_queue_name(service), passive=True)
        except ChannelNotFoundEntity:
            return 0
        return int(queue.declaration_result.consumer_count or 0)


@pytest.mark.amqp
async def test_two_replicas_of_a_backend_on_rabbitmq(
    tmp_path: Path, amqp_url: str, runtimes: Callable[[Settings], Runtimes]
) -> None:
    settings = make_settings(tmp_path, amqp_url=amqp_url)
    await migrate(settings)
    group = runtimes(settings)
    group.start("backends", list(BACKENDS), "amqp")
    group.start("gateway", ["gateway"], "amqp")
    await wait_for_health(settings.gateway.port, all_ok, "all five services ok", group)
    group.start("jobs-replica", ["jobs"], "amqp")

    async def two_consumers() -> bool:
        group.check_alive()
        return await rpc_consumers(amqp_url, "jobs") >= 2

    await until(
        two_consumers, "the second jobs replica consuming rpc-jobs", START_DEADLINE_S, interval=0.1
    )

    # The first runtime going away leaves jobs reachable through the replica.
    await group.stop("backends")
    for _ in range(5):
        await wait_for_health(
            settings.gateway.port,
            only_down("monitor", "reservations", "violations"),
            "jobs still served by its replica",
            group,
        )

    await group.stop("jobs-replica")
    await wait_for_health(
        settings.gateway.port, only_down(*BACKENDS), "every backend unreachable", group
    )
