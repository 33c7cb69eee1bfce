"""Which hosts of the inventory this monitor replica polls, kept in line with its peers.

Every replica hears the others' heartbeats (`services/shared/cluster/replicas.py`) and gives each
host to the replica that rendezvous hashing picks among the *active* ones (`shards.py`). A
replica that starts says `joining` for a heartbeat and a half, so it has heard its peers (and
asked them what they announced of their hosts) before it takes any host; then it says
`active` at once, with the moment, half a heartbeat later, from which it polls its hosts
(`active_from`): the replicas that held them poll them up to their last tick before it. A host
therefore moves with no gap, and is polled twice only if that heartbeat took longer than half a
heartbeat to arrive.

A replica that stops cleanly first stops polling, then says `stopping` and when it stopped: the
others take its hosts from their first tick after that moment (one that passed while the news
travelled is polled at once, late but not lost, and by one replica only). One that dies
(kill -9, cut off) is counted gone after `[replicas] dead_after_s`, or sooner when its
heartbeat is late and the broker no longer has its RPC queue (its connection closed: a killed
process; `peer_probe.py`); the others then poll its hosts at once, as they are already stale,
and go on at their ticks. The first polls of the
hosts a replica gains (at its start, at a takeover) are spread to `[monitor] handshakes_per_s`:
each opens an SSH connection (`shards.spread_first_polls`), unless the standby connection this
replica kept to it is open (`standby.py`: to the hosts it would take over; such a first poll is
not spread).

This machine read through NVML (a `local` host) is always polled by its own replica.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Collection, Mapping
from datetime import UTC, datetime
from typing import Any

from services.monitor.fleet_view import FleetView
from services.monitor.hosts.inventory import LOCAL, InventoryHost, diff_hosts
from services.monitor.monitor import Monitor
from services.monitor.readers import HostReader
from services.monitor.shards import owner, runner_up, spread_first_polls
from services.monitor.standby import Standby
from services.shared.cluster.background import cancel_and_wait
from services.shared.cluster.replicas import Replicas
from services.shared.config import HostConfig

log = logging.getLogger("warden.monitor")

SERVICE = "monitor"
ACTIVE, JOINING = "active", "joining"
HANDSHAKES_PER_S = 300.0  # first polls of gained hosts (each an SSH handshake) a second

ReaderFor = Callable[[HostConfig], HostReader]
AskPeers = Callable[[list[str]], Awaitable[None]]
Probe = Callable[[], Awaitable[list[str]]]  # peers found dead before their heartbeat expired


class Sharding:
    def __init__(
        self,
        monitor: Monitor,
        reader_for: ReaderFor,
        inventory: Mapping[str, InventoryHost],
        replicas: Replicas,
        view: FleetView,
        *,
        settle_s: float,
        check_s: float = 0.5,
        ask_peers: AskPeers | None = None,
        handshakes_per_s: float = HANDSHAKES_PER_S,
        probe: Probe | None = None,
        standby: Standby | None = None,
    ) -> None:
        self.monitor = monitor
        self.reader_for = reader_for
        self.inventory = inventory
        self.replicas = replicas
        self.view = view
        self.settle_s = settle_s
        self.check_s = check_s
        self.ask_peers = ask_peers
        self.handshakes_per_s = handshakes_per_s
        self.probe = probe
        self.standby = standby
        self._vanished: set[str] = set()  # peers `probe` found dead, until the next sync
        self.ready = False
        self.stopped_at: float | None = None  # wall clock, once handed over
        # Wall clock from which this replica polls its hosts: a moment after it said `active`,
        # so the replicas that held them (told by that heartbeat) stop them from then on.
        self.active_from: float | None = None
        self.running: dict[str, HostConfig] = {}
        self._owners: list[str] = []
        self._heard: dict[str, float] = {}  # when each active owner was last heard
        self._lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        replicas.on_change(self._on_change)

    @property
    def me(self) -> str:
        return self.replicas.replica_id

    def role(self) -> str:
        return ACTIVE if self.ready else JOINING

    def details(self) -> dict[str, Any]:
        found: dict[str, Any] = {"hosts": len(self.running)}
        if self.standby is not None and self.standby.hosts:
            found["standby"] = {
                "hosts": len(self.standby.hosts),
                "connected": self.standby.connected(),
            }
        if self.active_from is not None:
            found["active_from"] = self.active_from
        if self.stopped_at is not None:
            found["stopped_at"] = self.stopped_at
        return found

    def _on_change(self, service: str) -> None:
        if service == SERVICE:
            self._wake.set()

    def owners(self) -> list[str]:
        """The active replicas (this one once it is), by id; asking also expires the silent
        ones, and notes when each was last heard (to tell one that died from one that left)."""
        found = [
            r
            for r in self.replicas.live(SERVICE)
            # This one by what it is now, not by its last heartbeat heard back.
            if (self.ready if r.replica == self.me else r.role == ACTIVE)
        ]
        for replica in found:
            self._heard[replica.replica] = replica.heard_at
        return [r.replica for r in found]

    def mine(self, owners: list[str]) -> list[HostConfig]:
        if not self.ready:
            return []
        return [
            host.host
            for name, host in self.inventory.items()
            if host.source == LOCAL or owner(name, owners) == self.me
        ]

    def standby_hosts(self, owners: list[str]) -> dict[str, HostConfig]:
        """The hosts this replica would gain if the replica polling them left."""
        if not self.ready or len(owners) < 2:
            return {}
        return {
            name: host.host
            for name, host in self.inventory.items()
            if host.source != LOCAL
            and owner(name, owners) != self.me
            and runner_up(name, owners) == self.me
        }

    # --- running -----------------------------------------------------------------------------

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="monitor sharding")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)

    async def hand_over(self) -> None:
        """Stop polling, before this replica says `stopping` (with when it stopped)."""
        await self.stop()
        async with self._lock:
            # Still `active` until the `stopping` heartbeat, which says when polling stopped.
            self.stopped_at = await self.monitor.drain()
            log.info(
                "stopped polling %d host(s) at %s, for the other replicas to take over",
                len(self.running),
                datetime.fromtimestamp(self.stopped_at, UTC).isoformat(),
            )
            await self.monitor.remove(*self.running)
            self.running.clear()

    async def _run(self) -> None:
        if self.settle_s > 0:
            # Hear the peers before taking hosts: alone for a moment, this replica would
            # take every host from them.
            await asyncio.sleep(self.settle_s)
            peers = [r.replica for r in self.replicas.live(SERVICE) if r.replica != self.me]
            if peers and self.ask_peers is not None:
                try:
                    await self.ask_peers(peers)
                except Exception as err:  # their hosts' GPUs are announced again: harmless
                    log.warning("could not ask the other monitor replicas: %s", err)
        self.ready = True
        if self.settle_s > 0:
            self.active_from = time.time() + self.replicas.heartbeat_s / 2
        await self.sync()
        with contextlib.suppress(Exception):  # the next beat says it otherwise
            await self.replicas.beat()
        log.info(
            "monitor replica %s polls %d of %d host(s) (%d active replica(s))",
            self.me,
            len(self.running),
            len(self.inventory),
            len(self._owners),
        )
        while True:
            # asyncio.timeout, not wait_for: on Python 3.11 wait_for swallows a cancel that
            # comes as the event is set (the `stopping` heartbeat, at stop), and stop hangs.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.check_s):
                    await self._wake.wait()
            self._wake.clear()
            await self._probe()
            # `owners` asks for the live replicas, which also expires the silent ones.
            if self.owners() != self._owners:
                try:
                    await self.sync()
                except Exception:
                    log.exception("rebalancing the hosts failed")

    async def _probe(self) -> None:
        """Peers found dead before their heartbeat expires (`peer_probe`): gone now."""
        if self.probe is None:
            return
        try:
            found = await self.probe()
        except Exception as err:  # the broker is away: their heartbeats expire them
            log.debug("asking the broker about the other monitor replicas failed: %s", err)
            return
        for replica in found:
            log.info("monitor replica %s is gone (its connection closed)", replica)
            self._vanished.add(replica)
            self.replicas.forget(SERVICE, replica)

    def _starts(self, owners: list[str]) -> dict[str, float]:
        """When each active replica takes its hosts (monotonic), as it says (`active_from`)."""
        offset = time.monotonic() - time.time()
        found = {}
        for replica in self.replicas.live(SERVICE):
            details = self.details() if replica.replica == self.me else replica.details
            at = details.get("active_from")
            if replica.replica in owners and isinstance(at, int | float):
                found[replica.replica] = at + offset
        return found

    def _first_tick(
        self, name: str, before: list[str], handed: Mapping[str, float], start: float
    ) -> float:
        """A gained host's tick (monotonic): its first one after the replica that held it
        stopped, else from `start` (this replica's, or now when that has passed)."""
        previous = owner(name, before) if before else None
        if previous is not None and previous in handed:
            return self.monitor.next_tick(name, handed[previous])
        return self.monitor.next_tick(name, start)

    def _handed_over(self, before: list[str], owners: list[str]) -> dict[str, float]:
        """Replicas gone since `before` that said when they stopped polling: that moment, on
        the monotonic clock."""
        found = {}
        offset = time.monotonic() - time.time()
        for replica in before:
            stopped_at = self.replicas.left.get(replica, {}).get("stopped_at")
            if replica not in owners and isinstance(stopped_at, int | float):
                found[replica] = stopped_at + offset
        return found

    async def _reader(self, host: HostConfig) -> HostReader:
        """The standby's reader for a host gained (its connection maybe open), else a new one."""
        kept = None if self.standby is None else await self.standby.take(host)
        return kept if kept is not None else self.reader_for(host)

    async def sync(self, *, now: Collection[str] = ()) -> None:
        """Poll exactly this replica's hosts: start the ones it gained, stop the ones it lost.

        `now`: hosts added or changed through the inventory, polled at once.
        """
        async with self._lock:
            before = self._owners
            owners = self.owners()
            moment = time.monotonic()
            limit = (self.replicas.heartbeat_s + self.replicas.dead_after_s) / 2
            # Went silent (not `stopping`): its hosts are stale by now.
            died = {
                r
                for r in before
                if r not in owners
                and (r in self._vanished or moment - self._heard.get(r, moment) >= limit)
            }
            self._vanished.clear()
            self._owners = owners
            self._heard = {r: self._heard[r] for r in owners if r in self._heard}
            diff = diff_hosts(self.running, self.mine(owners))
            # Hosts that go to a replica that joins: polled here until it starts.
            starts = self._starts(owners)
            handed_off: dict[float, list[str]] = {}
            orphans = {h.name for h in diff.added if before and owner(h.name, before) in died}
            handed = self._handed_over(before, owners)
            start = max(moment, starts.get(self.me, 0))
            due = {
                host.name: moment  # a silent replica's: stale already, at once
                if host.name in orphans
                else self._first_tick(host.name, before, handed, start)
                for host in diff.added
                if host.name not in now  # added or changed through the inventory: at once
            }
            readers = {host.name: await self._reader(host) for host in diff.added}
            # Only a first poll that opens its connection is spread.
            connected = {n: due[n] for n, r in readers.items() if r.connected and n in due}
            first_ticks = spread_first_polls(
                {name: at for name, at in due.items() if name not in connected},
                self.handshakes_per_s,
            )
            first_ticks.update(connected)
            if self.standby is not None:  # before the removals: their connections may stay
                await self.standby.update(
                    self.standby_hosts(owners),
                    # Once the first polls are done: they cost more at once than standbys.
                    not_before=max(first_ticks.values(), default=moment) + self.monitor.interval_s,
                )
            for name in diff.removed:
                self.running.pop(name, None)
                gainer = owner(name, owners) if name in self.inventory else None
                if gainer in starts and starts[gainer] > moment:
                    handed_off.setdefault(starts[gainer], []).append(name)
            for at, names in handed_off.items():
                self.monitor.hand_off(names, at)
            leaving = {n for names in handed_off.values() for n in names}
            await self.monitor.remove(*(n for n in diff.removed if n not in leaving))
            for host in diff.added:
                state = self.view.seed(host.name)
                await self.monitor.add(
                    readers[host.name],
                    host.labels,
                    first_tick=first_ticks.get(host.name),
                    state=state,
                )
                self.running[host.name] = host
            for replica, at in handed.items():
                stopped = datetime.fromtimestamp(at - time.monotonic() + time.time(), UTC)
                log.info("%s stopped polling at %s: its hosts from then on", replica, stopped)
                self.replicas.left.pop(replica, None)
            for host in diff.changed:  # read differently now: a new reader, polled at once
                await self.monitor.add(self.reader_for(host), host.labels)
                self.running[host.name] = host
            for host in diff.relabeled:
                self.monitor.relabel(host.name, host.labels)
                self.running[host.name] = host
            if before and (diff.added or diff.removed):
                log.info(
                    "hosts rebalanced over %d monitor replica(s): %d gained%s, %d given away; "
                    "polling %d",
                    len(owners),
                    len(diff.added),
                    f" ({len(orphans)} of a replica gone silent)" if orphans else "",
                    len(diff.removed),
                    len(self.running),
                )
