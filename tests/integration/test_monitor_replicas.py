"""Two monitor replicas, each its own OS process (`warden run monitor`), on RabbitMQ with one
PostgreSQL database, against a simulated fleet served over real SSH in this process.

What is observed, not asked: which process holds the SSH connection to each host (the sim's
client ports, matched to processes through /proc), and every `host.sampled` event. A host's
samples are placed in its tick slots (`shards.phase`): two samples in one slot are a double
poll, a slot skipped between two samples is a gap. The replicas split the hosts, each host
polled by exactly one; one replica killed with SIGKILL, the other polls all its hosts again;
started again, the hosts rebalance with neither a double poll nor a gap (the killed one is found
dead by its closed connection, before its heartbeat expires); the other stopped
cleanly (SIGTERM), its hosts move without a gap. Each GPU is announced once in all of it.

Deadlines are generous; nothing asserts how long anything took (bench/_monitor_sharding.py
measures that).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import signal
import subprocess
import sys
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pytest

from services.monitor.shards import phase
from services.shared.bus.amqp import AmqpBus
from services.shared.contracts import Envelope
from services.sim.model import SimFleet
from tests.support.config import write_config
from tests.support.events import record
from tests.support.fleet import ServedFleet, served_fleet
from tests.support.polling import until

pytestmark = [pytest.mark.amqp, pytest.mark.postgres, pytest.mark.faults, pytest.mark.timeout(300)]

WARDEN = [sys.executable, "-m", "services.cli"]
HOSTS = 12
ADDED = 4  # more hosts served, added through the API once both replicas run
INTERVAL_S = 3.0  # a first poll on a new connection (a handshake) fits, even under load
DEADLINE_S = 60.0


# --- which process holds which SSH connection -------------------------------------------------


def _socket_inodes(pid: int) -> set[str]:
    found = set()
    with os.scandir(f"/proc/{pid}/fd") as entries:
        for entry in entries:
            try:
                target = os.readlink(entry.path)
            except OSError:
                continue
            if target.startswith("socket:["):
                found.add(target[8:-1])
    return found


def _connection_inodes() -> dict[tuple[int, int], str]:
    """(local port, remote port) -> socket inode, of every TCP socket on this machine."""
    found: dict[tuple[int, int], str] = {}
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as lines:
            next(lines)
            for line in lines:
                columns = line.split()
                local = int(columns[1].rsplit(":", 1)[1], 16)
                remote = int(columns[2].rsplit(":", 1)[1], 16)
                found[(local, remote)] = columns[9]
    return found


def holders(served: ServedFleet, pids: list[int], hosts: set[str]) -> dict[str, set[int]]:
    """Host -> the processes (of `pids`) with an SSH connection open to it."""
    inodes = {pid: _socket_inodes(pid) for pid in pids}
    connections = _connection_inodes()
    found: dict[str, set[int]] = {}
    for host in hosts:
        server_port = served.server.ports[host]
        found[host] = {
            pid
            for port in served.server.client_ports(host)
            for pid in pids
            if connections.get((port, server_port)) in inodes[pid]
        }
    return found


# --- the replicas -------------------------------------------------------------------------------


@dataclass
class Replicas:
    config: Path
    tmp: Path
    env: dict[str, str]
    hosts: set[str] = field(default_factory=set)  # the inventory's
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    starts: int = 0

    def start(self, label: str) -> int:
        self.starts += 1
        log = (self.tmp / f"{label}-{self.starts}.log").open("wb")
        self.processes[label] = subprocess.Popen(
            [*WARDEN, "run", "monitor", "--config", str(self.config)],
            env=self.env,
            cwd=self.tmp,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        return self.processes[label].pid

    def pids(self) -> list[int]:
        return [p.pid for p in self.processes.values() if p.poll() is None]

    def stop(self, label: str, sig: int) -> None:
        process = self.processes.pop(label)
        process.send_signal(sig)
        process.wait(timeout=30)

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted(self.tmp.glob("*.log"))
        )

    def close(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
                process.wait(timeout=30)


System = tuple[ServedFleet, Replicas, list[Envelope], AmqpBus]


@pytest.fixture
async def system(tmp_path: Path, amqp_url: str, pg_url: str) -> AsyncIterator[System]:
    # Without standby connections: the connection to a host tells which process polls it.
    async with running_system(tmp_path, amqp_url, pg_url, standby=False) as found:
        yield found


@contextlib.asynccontextmanager
async def running_system(
    tmp_path: Path, amqp_url: str, pg_url: str, *, standby: bool
) -> AsyncIterator[System]:
    async with served_fleet(SimFleet(HOSTS + ADDED, 2, seed=5, churn=False), tmp_path) as served:
        config = write_config(
            tmp_path / "warden.toml",
            ssh=served.config()["ssh"],
            hosts=served.hosts()[:HOSTS],
            bus={"amqp_url": amqp_url},
            storage={"data_dir": str(tmp_path / "data"), "database_url": pg_url},
            monitor={
                "local_nvml": "off",
                "interval_s": INTERVAL_S,
                "standby_connections": standby,
            },
            # As by default, a replica counts as dead after more than an interval and a
            # heartbeat: the survivor's first poll of a host is in a later tick slot than the
            # dead one's last.
            replicas={"heartbeat_s": 0.5, "dead_after_s": 4.0},
            log={"level": "info"},
        )
        env = {**os.environ, "HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"}
        migrate = await asyncio.create_subprocess_exec(
            *WARDEN, "db", "upgrade", "monitor", "--config", str(config), env=env
        )
        assert await migrate.wait() == 0
        replicas = Replicas(config, tmp_path, env, {h["name"] for h in served.hosts()[:HOSTS]})
        client = AmqpBus(amqp_url, name="test-client")
        await client.start()
        events: list[Envelope] = []
        try:
            await record(client, events, "monitor", "host.sampled")
            await record(client, events, "monitor", "gpu.*")
            yield served, replicas, events, client
        finally:
            replicas.close()
            await client.close()


# --- what the samples say -----------------------------------------------------------------------


def _slot(host: str, sampled_at: str) -> int:
    at = datetime.fromisoformat(sampled_at).timestamp()
    return math.floor((at - phase(host, INTERVAL_S) + 0.05) / INTERVAL_S)


def slots(events: list[Envelope], since: float = 0.0) -> dict[str, list[int]]:
    """Host -> the tick slots of its samples taken after `since` (Unix time), in order."""
    found: dict[str, list[int]] = defaultdict(list)
    for event in events:
        if event.type == "host.sampled":
            at = event.data["sampled_at"]
            if datetime.fromisoformat(at).timestamp() > since:
                found[event.data["host"]].append(_slot(event.data["host"], at))
    return {host: sorted(values) for host, values in found.items()}


def double_polls(events: list[Envelope], since: float) -> dict[str, list[int]]:
    """Hosts sampled twice in one tick slot, among the samples taken after `since`."""
    return {
        host: [s for s in set(values) if values.count(s) > 1]
        for host, values in slots(events, since).items()
        if len(set(values)) != len(values)
    }


def gaps(events: list[Envelope], since: float, until_: float) -> dict[str, list[int]]:
    """Hosts with a tick slot skipped between `since` and `until_`."""
    found = {}
    for host, values in slots(events, since).items():
        end = _slot(host, datetime.fromtimestamp(until_).astimezone().isoformat())
        inside = [s for s in values if s <= end]
        skipped = [b for a, b in itertools.pairwise(inside) if b - a > 1]
        if skipped:
            found[host] = skipped
    return found


def sampled_after(events: list[Envelope], since: float) -> set[str]:
    return set(slots(events, since))


# --- the test -----------------------------------------------------------------------------------


def shares(served: ServedFleet, replicas: Replicas) -> dict[int, set[str]] | None:
    """Process -> its hosts, when every host is held by exactly one process and each process
    holds at least one; else None."""
    pids = replicas.pids()
    held = holders(served, pids, replicas.hosts)
    if any(len(owners) != 1 for owners in held.values()):
        return None
    found: dict[int, set[str]] = {pid: set() for pid in pids}
    for host, owners in held.items():
        found[next(iter(owners))].add(host)
    return found if all(found.values()) else None


async def test_two_replicas_split_fail_over_and_rebalance(system: System) -> None:
    served, replicas, events, client = system
    all_hosts = set(replicas.hosts)

    def report() -> str:
        held = holders(served, replicas.pids(), replicas.hosts)
        last = {h: max(v) for h, v in slots(events).items()}
        return f"held: {held}\nlast slots: {last}\n{replicas.logs()}"

    # One replica alone polls every host.
    first = replicas.start("a")
    await until(
        lambda: sampled_after(events, 0) == all_hosts,
        "every host sampled",
        DEADLINE_S,
        report=report,
    )
    assert (
        await until(lambda: shares(served, replicas), "a holding all", DEADLINE_S, report=report)
    ) == {first: all_hosts}

    # A second one joins: the hosts are split, each held by exactly one process.
    joined_at = datetime.now().timestamp()
    second = replicas.start("b")
    split = await until(
        lambda: (found := shares(served, replicas)) and len(found) == 2 and found,
        "the hosts split over two replicas",
        DEADLINE_S,
        report=report,
    )
    assert split[first] | split[second] == all_hosts and not split[first] & split[second]
    steady = datetime.now().timestamp()
    await until(
        lambda: (
            all(len(v) >= 3 for v in slots(events, steady).values())
            and sampled_after(events, steady) == all_hosts
        ),
        "three more samples of every host",
        DEADLINE_S,
        report=report,
    )
    assert double_polls(events, joined_at - INTERVAL_S) == {}
    assert gaps(events, joined_at - INTERVAL_S, datetime.now().timestamp()) == {}

    # Hosts added through the API (whichever replica answers) are polled by their owner, and
    # any replica's snapshot shows every host, each from the replica that polls it.
    added_at = datetime.now().timestamp()
    for entry in served.hosts()[HOSTS:]:
        await client.call("monitor", "add_host", entry, timeout=30)
        replicas.hosts.add(entry["name"])
    all_hosts = set(replicas.hosts)
    split = await until(
        lambda: (found := shares(served, replicas)) and len(found) == 2 and found,
        "the added hosts held by one replica each",
        DEADLINE_S,
        report=report,
    )
    await until(
        lambda: sampled_after(events, added_at) == all_hosts, "the added hosts sampled", DEADLINE_S
    )
    for _ in range(4):  # answered by either replica
        snapshot = await client.call("monitor", "snapshot", {}, timeout=10)
        assert {h["name"] for h in snapshot["hosts"] if h["last_seen"]} == all_hosts

    # SIGKILL the second: the first polls its hosts again.
    killed_at = datetime.now().timestamp()
    replicas.stop("b", signal.SIGKILL)
    await until(
        lambda: (
            sampled_after(events, killed_at) >= split[second]
            and shares(served, replicas) == {first: all_hosts}
        ),
        "the killed replica's hosts sampled again, by the survivor",
        DEADLINE_S,
        report=report,
    )
    # Found dead by its closed connection (its RPC queue gone from the broker), not only by
    # its silence (after `dead_after_s`).
    survivor_log = replicas.tmp / "a-1.log"
    assert "is gone (its connection closed)" in survivor_log.read_text(errors="replace")

    # Started again: the hosts rebalance without a double poll or a gap.
    rejoined_at = datetime.now().timestamp()
    third = replicas.start("b")
    again = await until(
        lambda: (found := shares(served, replicas)) and len(found) == 2 and found,
        "the hosts split again",
        DEADLINE_S,
        report=report,
    )
    assert again[first] | again[third] == all_hosts  # a new id: a share of its own
    settled = datetime.now().timestamp()
    await until(
        lambda: (
            all(len(v) >= 2 for v in slots(events, settled).values())
            and sampled_after(events, settled) == all_hosts
        ),
        "two more samples of every host",
        DEADLINE_S,
        report=report,
    )
    assert double_polls(events, rejoined_at) == {}
    assert gaps(events, rejoined_at - INTERVAL_S, datetime.now().timestamp()) == {}

    # The first stops cleanly: its hosts move to the other without a gap.
    stopped_at = datetime.now().timestamp()
    replicas.stop("a", signal.SIGTERM)
    await until(
        lambda: shares(served, replicas) == {third: all_hosts},
        "the remaining replica holding every host",
        DEADLINE_S,
        report=report,
    )
    after = datetime.now().timestamp()
    await until(
        lambda: all(len(v) >= 2 for v in slots(events, after).values()),
        "two more samples of every host",
        DEADLINE_S,
        report=report,
    )
    doubled = double_polls(events, stopped_at - INTERVAL_S)
    assert doubled == {}, [
        (e.data["host"], e.data["sampled_at"], e.id)
        for e in events
        if e.type == "host.sampled" and e.data["host"] in doubled
    ][-6:]
    assert gaps(events, stopped_at - INTERVAL_S, datetime.now().timestamp()) == {}

    # Hosts moved four times; each GPU was announced once.
    discovered = [(e.data["host"], e.data["uuid"]) for e in events if e.type == "gpu.discovered"]
    assert len(discovered) == len(set(discovered)) == (HOSTS + ADDED) * 2


async def test_a_takeover_polls_over_the_connections_the_survivor_kept_open(
    tmp_path: Path, amqp_url: str, pg_url: str
) -> None:
    async with running_system(tmp_path, amqp_url, pg_url, standby=True) as system:
        served, replicas, events, _ = system
        all_hosts = set(replicas.hosts)

        def report() -> str:
            return f"held: {holders(served, replicas.pids(), all_hosts)}\n{replicas.logs()}"

        first, second = replicas.start("a"), replicas.start("b")
        # Each host polled by one replica, and connected from both: the other keeps a
        # standby connection to it.
        await until(
            lambda: all(
                len(served.server.client_ports(h)) == 2
                and holders(served, [first, second], {h})[h] == {first, second}
                for h in all_hosts
            ),
            "every host connected from both replicas",
            DEADLINE_S,
            report=report,
        )
        steady = datetime.now().timestamp()
        await until(
            lambda: sampled_after(events, steady) == all_hosts, "every host sampled", DEADLINE_S
        )
        ports = {h: set(served.server.client_ports(h)) for h in all_hosts}

        killed_at = datetime.now().timestamp()
        replicas.stop("b", signal.SIGKILL)
        await until(
            lambda: sampled_after(events, killed_at) == all_hosts,
            "every host sampled after the kill",
            DEADLINE_S,
            report=report,
        )
        # The survivor polls them all over the connections it had: none opened since.
        kept = {h: set(served.server.client_ports(h)) for h in all_hosts}
        assert all(kept[h] and kept[h] < ports[h] for h in all_hosts), (ports, kept)
        assert holders(served, replicas.pids(), all_hosts) == {h: {first} for h in all_hosts}
        discovered = [
            (e.data["host"], e.data["uuid"]) for e in events if e.type == "gpu.discovered"
        ]
        assert len(discovered) == len(set(discovered)) == HOSTS * 2


async def test_replicas_starting_together_seed_the_inventory_once(pg_url: str) -> None:
    from services.monitor.hosts.host_store import HostStore
    from services.shared.config import HostConfig
    from services.shared.storage import db

    engine = db.create_engine(pg_url)
    try:
        await db.upgrade(engine, "monitor")
        configured = [
            HostConfig(name=f"h{i:03d}", address="10.0.0.1", user="warden") for i in range(300)
        ]
        seeded = await asyncio.gather(*(HostStore(engine).seed(configured) for _ in range(4)))
        assert all([row.name for row in rows] == [h.name for h in configured] for rows in seeded)
        assert len(await HostStore(engine).all()) == len(configured)
    finally:
        await engine.dispose()
