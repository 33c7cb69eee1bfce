"""The monitor's inventory, live: hosts added, edited and removed through its RPC methods are
polled (or no longer) without a restart; [[hosts]] seeds the database across restarts (a
removed host stays removed); a host's key is checked (trusted / new / changed) before an admin
accepts it. A simulated fleet over real SSH, SQLite and PostgreSQL."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh
import pytest

from services.monitor import api
from services.monitor.service import start as start_monitor
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings, load_settings
from services.shared.contracts import Envelope
from services.shared.errors import AlreadyExists, InvalidRequest, NotFound, StateConflict
from services.shared.remote.ssh import key_line
from services.shared.runtime import ServiceContext
from services.shared.storage import db
from services.sim.model import SimFleet
from tests.support import polling
from tests.support.config import write_config
from tests.support.events import record
from tests.support.fleet import ServedFleet, served_fleet

INTERVAL_S = 0.3
until = functools.partial(polling.until, timeout=20.0)


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def storage(request: pytest.FixtureRequest) -> dict[str, Any]:
    if request.param == "postgres":
        return {"database_url": request.getfixturevalue("pg_url")}
    return {}


@dataclass
class Monitor:
    """The monitor service running (started again by `restart`) on an in-process bus."""

    served: ServedFleet
    directory: Path
    storage: dict[str, Any]
    bus: InProcessBus = field(default_factory=InProcessBus)
    events: list[Envelope] = field(default_factory=list)
    settings: Settings | None = None
    _teardown: Callable[[], Any] | None = None

    async def start(self, hosts: list[dict[str, Any]], **ssh: Any) -> None:
        config = self.served.config()
        config["ssh"].update(ssh)
        path = write_config(
            self.directory / "warden.toml",
            ssh=config["ssh"],
            hosts=hosts,
            monitor={"interval_s": INTERVAL_S},
            storage=self.storage,
        )
        self.settings = load_settings(path, environ={})
        engine = db.create_engine(self.settings.storage.database_url_for("monitor"))
        await db.upgrade(engine, "monitor")
        await engine.dispose()
        self._teardown = await start_monitor(ServiceContext("monitor", self.settings, self.bus))

    async def stop(self) -> None:
        if self._teardown is not None:
            await self._teardown()
            self._teardown = None

    async def call(self, method: api.Method, **args: Any) -> Any:
        return await method.call(self.bus, args)

    async def inventory(self) -> dict[str, dict[str, Any]]:
        return {h["name"]: h for h in (await self.call(api.LIST_HOSTS))["hosts"]}

    async def snapshot(self) -> dict[str, dict[str, Any]]:
        return {h["name"]: h for h in (await self.call(api.SNAPSHOT))["hosts"]}

    def of(self, event_type: str) -> list[dict[str, Any]]:
        return [e.data for e in self.events if e.type == event_type]


@contextlib.asynccontextmanager
async def monitor_of(
    fleet: SimFleet, tmp_path: Path, storage: dict[str, Any]
) -> AsyncIterator[Monitor]:
    async with served_fleet(fleet, tmp_path) as served:
        running = Monitor(served, tmp_path, storage)
        await running.bus.start()
        await record(running.bus, running.events, "monitor")
        try:
            yield running
        finally:
            await running.stop()
            await running.bus.close()


def candidate(served: ServedFleet, name: str, **changes: Any) -> dict[str, Any]:
    """A sim host's fields as ADD_HOST takes them."""
    [entry] = [h for h in served.hosts() if h["name"] == name]
    return {**entry, **changes}


def gpu_uuids(fleet: SimFleet, host: str) -> set[str]:
    return {gpu["uuid"] for gpu in fleet.snapshot(host)["hosts"][0]["gpus"]}


def sampled_uuids(host: dict[str, Any] | None) -> set[str]:
    sample = (host or {}).get("sample") or {}
    return {gpu["uuid"] for gpu in sample.get("gpus", [])}


async def test_hosts_added_edited_and_removed_are_polled_accordingly(
    tmp_path: Path, storage: dict[str, Any]
) -> None:
    fleet = SimFleet(3, 2, seed=7, churn=False)
    async with monitor_of(fleet, tmp_path, storage) as monitor:
        await monitor.start([candidate(monitor.served, "sim-001")])
        assert (await monitor.inventory())["sim-001"]["source"] == "config"

        added = await monitor.call(
            api.ADD_HOST, **candidate(monitor.served, "sim-002", labels=["a100", "lab-b"])
        )
        assert added["source"] == "api" and added["labels"] == ["a100", "lab-b"]
        # The event is published before the answer; it reaches consumers soon after.
        await until(lambda: monitor.of("host.added") == [{"host": added}], "host.added")
        with pytest.raises(AlreadyExists):
            await monitor.call(api.ADD_HOST, **candidate(monitor.served, "sim-002"))

        async def polled(name: str, uuids: set[str]) -> bool:
            host = (await monitor.snapshot()).get(name)
            return bool(host and host["reachable"] and sampled_uuids(host) == uuids)

        await until(lambda: polled("sim-002", gpu_uuids(fleet, "sim-002")), "sim-002 polled")
        assert (await monitor.snapshot())["sim-002"]["labels"] == ["a100", "lab-b"]

        # Pointed at sim-003's port: the same name now reads the other host's GPUs.
        port = monitor.served.server.ports["sim-003"]
        edited = await monitor.call(api.UPDATE_HOST, name="sim-002", port=port)
        assert edited["port"] == port
        await until(lambda: monitor.of("host.updated") == [{"host": edited}], "host.updated")
        await until(lambda: polled("sim-002", gpu_uuids(fleet, "sim-003")), "the new address")
        assert monitor.served.server.open_connections("sim-002") == 0  # the old reader closed

        removed = await monitor.call(api.REMOVE_HOST, name="sim-002")
        assert removed == edited
        await until(lambda: monitor.of("host.removed") == [{"host": "sim-002"}], "host.removed")
        assert "sim-002" not in await monitor.snapshot()
        with pytest.raises(NotFound):
            await monitor.call(api.SNAPSHOT, host="sim-002")
        polls = (await monitor.call(api.STATS))["polls"]

        async def more_polls() -> bool:
            return bool((await monitor.call(api.STATS))["polls"] >= polls + 3)

        await until(more_polls, "three more polls (of sim-001 alone)")
        assert monitor.served.server.open_connections("sim-003") == 0
        assert set(await monitor.inventory()) == {"sim-001"}
        with pytest.raises(NotFound):
            await monitor.call(api.REMOVE_HOST, name="sim-002")
        with pytest.raises(InvalidRequest):
            await monitor.call(api.ADD_HOST, name="bad", probe="ssh", address="")


async def test_hosts_tables_seed_the_inventory_and_a_removed_host_stays_removed(
    tmp_path: Path, storage: dict[str, Any]
) -> None:
    fleet = SimFleet(3, 1, seed=3, churn=False)
    async with monitor_of(fleet, tmp_path, storage) as monitor:
        served = monitor.served
        one, two, three = (candidate(served, f"sim-00{i}") for i in (1, 2, 3))
        await monitor.start([one, two])
        await monitor.call(api.REMOVE_HOST, name="sim-001")
        await monitor.call(api.UPDATE_HOST, name="sim-002", labels=["edited"])
        await monitor.stop()

        # The config changes sim-002 (edited through the API: it keeps the API's) and adds
        # sim-003; sim-001, removed through the API, is not seeded again.
        await monitor.start([one, {**two, "labels": ["from-config"]}, three])
        hosts = await monitor.inventory()
        assert set(hosts) == {"sim-002", "sim-003"}
        assert hosts["sim-002"]["labels"] == ["edited"] and hosts["sim-002"]["source"] == "api"
        assert hosts["sim-003"]["source"] == "config"
        await until(
            lambda: polled_ok(monitor, "sim-003"), "sim-003 seeded from the config and polled"
        )
        await monitor.stop()

        # A config-seeded host follows the config: changed with it, gone with its table.
        await monitor.start([one, two, {**three, "labels": ["x"]}])
        assert (await monitor.inventory())["sim-003"]["labels"] == ["x"]
        await monitor.stop()
        await monitor.start([one, two])
        assert set(await monitor.inventory()) == {"sim-002"}

        # Added again, the removed host is back (from the API now).
        again = await monitor.call(api.ADD_HOST, **one)
        assert again["source"] == "api"
        await until(lambda: polled_ok(monitor, "sim-001"), "sim-001 polled again")
        await monitor.stop()
        await monitor.start([one, two])
        assert set(await monitor.inventory()) == {"sim-001", "sim-002"}


async def polled_ok(monitor: Monitor, name: str) -> bool:
    host = (await monitor.snapshot()).get(name)
    return bool(host and host["reachable"])


async def test_a_host_key_is_checked_before_it_is_trusted(tmp_path: Path) -> None:
    fleet = SimFleet(2, 2, seed=5, churn=False)
    async with monitor_of(fleet, tmp_path, {}) as monitor:
        empty = tmp_path / "empty_known_hosts"
        empty.write_text("")
        await monitor.start([], known_hosts=str(empty))
        served = monitor.served
        expected = key_line(served.server.host_key)
        fingerprint = served.server.host_key.get_fingerprint("sha256")

        # Not in known_hosts: "new", and still logged in to list what is accepted.
        check = await monitor.call(api.CHECK_HOST, **candidate(served, "sim-001"))
        assert check["ok"] and check["host_key"] == {
            "line": expected,
            "fingerprint": fingerprint,
            "status": "new",
        }
        assert {g["uuid"] for g in check["gpus"]} == gpu_uuids(fleet, "sim-001")

        # Added without a key: polled, unreachable, saying how to accept the key.
        await monitor.call(api.ADD_HOST, **candidate(served, "sim-001"))

        async def refused() -> str | None:
            host = (await monitor.snapshot()).get("sim-001") or {}
            return str(host["down_reason"]) if host.get("reachable") is False else None

        reason = await until(refused, "sim-001 unreachable: its key is not trusted")
        assert "warden hosts check sim-001" in reason

        # Accepted: trusted from now on, polled at once.
        await monitor.call(api.UPDATE_HOST, name="sim-001", host_key=check["host_key"]["line"])
        await until(lambda: polled_ok(monitor, "sim-001"), "sim-001 polled with its key")
        again = await monitor.call(api.CHECK_HOST, name="sim-001")
        assert again["ok"] and again["host_key"]["status"] == "trusted"

        # Another key trusted for the host: "changed", and no login (no command runs; the
        # inventory is empty now, so nothing else runs any either).
        await monitor.call(api.REMOVE_HOST, name="sim-001")
        other = key_line(asyncssh.generate_private_key("ssh-ed25519"))
        requests = served.server.requests
        changed = await monitor.call(api.CHECK_HOST, **candidate(served, "sim-001", host_key=other))
        assert not changed["ok"] and changed["gpus"] == []
        assert changed["host_key"]["status"] == "changed"
        assert changed["host_key"]["fingerprint"] == fingerprint
        assert "not logging in" in changed["detail"]
        assert served.server.requests == requests

        # A candidate unreachable: why, in words; a key that is no key: refused.
        closed = await monitor.call(
            api.CHECK_HOST, name="gone", address="127.0.0.1", port=1, user="warden"
        )
        assert not closed["ok"] and closed["detail"] == "connection refused"
        with pytest.raises(InvalidRequest):
            await monitor.call(api.ADD_HOST, **candidate(served, "sim-002", host_key="not a key"))


async def test_this_machine_cannot_be_edited_or_removed(tmp_path: Path) -> None:
    fleet = SimFleet(1, 1, seed=1, churn=False)
    async with served_fleet(fleet, tmp_path) as served:
        path = write_config(
            tmp_path / "warden.toml",
            **served.config(),
            monitor={"interval_s": INTERVAL_S, "local_nvml": "on", "local_name": "head"},
        )
        settings = load_settings(path, environ={})
        engine = db.create_engine(settings.storage.database_url_for("monitor"))
        await db.upgrade(engine, "monitor")
        await engine.dispose()
        bus = InProcessBus()
        await bus.start()
        teardown = await start_monitor(ServiceContext("monitor", settings, bus))
        try:
            hosts = {h["name"]: h for h in (await api.LIST_HOSTS.call(bus))["hosts"]}
            assert hosts["head"]["source"] == "local" and hosts["head"]["probe"] == "nvml"
            with pytest.raises(StateConflict):
                await api.REMOVE_HOST.call(bus, {"name": "head"})
            with pytest.raises(StateConflict):
                await api.UPDATE_HOST.call(bus, {"name": "head", "labels": ["x"]})
        finally:
            await teardown()
            await bus.close()
