"""A whole Warden for the end-to-end tests, put together from the same parts each time:

    async with served_fleet(SimFleet(2, 4, seed=3, churn=False), tmp_path) as served:
        settings = await system_settings(tmp_path, served, monitor={"interval_s": 0.5})
        async with buses(settings, kind) as (bus, client), running_services(
            ["monitor", "reservations"], settings, kind, bus
        ) as services:
            gpu = await discovered_gpu(client, served.fleet.hosts[0], 2)

`system_settings` writes the config (test defaults, the fleet's SSH files and hosts, then the
flow's own sections), migrates every database and creates the accounts of accounts.py;
`running_services` runs the services in the test's event loop as `warden run all` does.
Deadlines are generous; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from services.shared.bus import Bus
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings, load_settings
from services.shared.runtime import make_bus, run_services
from tests.support.accounts import create_accounts
from tests.support.config import merged, write_config
from tests.support.fleet import ServedFleet
from tests.support.polling import until

DEADLINE_S = 30.0
STOP_DEADLINE_S = 60.0
# Heartbeats every 0.5 s (the default is 2 s): on RabbitMQ a monitor waits 1.5 heartbeats to
# hear its peers before it polls. A flow's own [replicas] section goes over this one.
FAST_REPLICAS = {"replicas": {"heartbeat_s": 0.5}}
# The params of a system fixture that runs once on each bus; see `bus_config`.
BUS_KINDS = ["inproc", pytest.param("amqp", marks=pytest.mark.amqp)]


def bus_config(request: pytest.FixtureRequest) -> dict[str, Any]:
    """The [bus] section for the kind `request.param`: on "amqp" the test's own RabbitMQ
    vhost (fixture `amqp_url`), on "inproc" nothing."""
    if request.param == "amqp":
        return {"amqp_url": request.getfixturevalue("amqp_url")}
    return {}


async def system_settings(directory: Path, served: ServedFleet, **sections: Any) -> Settings:
    """Write `directory`/warden.toml for `served` with `sections` merged over it, migrate every
    database and create the accounts; return the settings read back from that file."""
    config = write_config(
        directory / "warden.toml", **merged(served.config(), FAST_REPLICAS, sections)
    )
    settings = load_settings(config, environ={"HOME": str(directory)})
    await create_accounts(settings)
    return settings


@contextlib.asynccontextmanager
async def buses(settings: Settings, kind: str) -> AsyncIterator[tuple[Bus, Bus]]:
    """(the services' bus, the test's own): one in-process bus for both, or two connections
    to RabbitMQ at `settings.bus.amqp_url` (the test's is started and closed here)."""
    if kind == "inproc":
        bus = InProcessBus()
        yield bus, bus
    else:
        client = make_bus(settings, "amqp", name="test")
        await client.start()
        try:
            yield make_bus(settings, "amqp", name="t"), client
        finally:
            await client.close()


class Services:
    """`run_services` (what `warden run all` runs) as a task of the test's: started, asked to
    stop and awaited, and started again when a test restarts them."""

    def __init__(self, names: Sequence[str], settings: Settings, bus_kind: str) -> None:
        self.names = list(names)
        self.settings = settings
        self.bus_kind = bus_kind
        self.task: asyncio.Task[None] | None = None
        self._stop = asyncio.Event()

    def start(self, bus: Bus) -> None:
        self._stop = asyncio.Event()
        self.task = asyncio.create_task(
            run_services(
                self.names, self.settings, bus_kind=self.bus_kind, bus=bus, stop=self._stop
            )
        )

    async def stop(self) -> None:
        """Wait for `run_services` to return after its stop event; if it does not within the
        deadline, print where every other task is stuck before failing (a rare teardown hang,
        not reproduced on demand, is otherwise a bare TimeoutError)."""
        running, self.task = self.task, None
        if running is None:
            return
        self._stop.set()
        try:
            await asyncio.wait_for(asyncio.shield(running), STOP_DEADLINE_S)
        except TimeoutError:
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    print(f"still running at teardown: {task!r}", file=sys.stderr)
                    task.print_stack(limit=8, file=sys.stderr)
            running.cancel()
            raise


@contextlib.asynccontextmanager
async def running_services(
    names: Sequence[str], settings: Settings, bus_kind: str, bus: Bus
) -> AsyncIterator[Services]:
    """The services `names` running on `bus` until the end of the block."""
    services = Services(names, settings, bus_kind)
    services.start(bus)
    try:
        yield services
    finally:
        await services.stop()


async def discovered_gpu(bus: Bus, host: str, index: int) -> dict[str, Any]:
    """GPU `index` of `host` (uuid, host, index, ...) once the reservations service knows it."""

    async def known() -> dict[str, Any] | None:
        with contextlib.suppress(Exception):
            for gpu in await bus.call("reservations", "list_gpus", {}):
                if gpu["host"] == host and gpu["index"] == index:
                    return dict(gpu)
        return None

    what = f"GPU {index} of {host} reaching the reservations service"
    return await until(known, what, DEADLINE_S, interval=0.2)
