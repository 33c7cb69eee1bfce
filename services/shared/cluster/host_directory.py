"""The live list of hosts a service works with (`HostDirectory`), kept from the monitor's inventory.

The monitor owns the host list (`[[hosts]]` seeds it; the API, the CLI and the UI change it).
Jobs and violations log in to hosts, so each keeps a copy:

- at start, the config's `[[hosts]]`: nothing is lost while the monitor is not up yet;
- then the monitor's answer to `list_hosts` (asked until it answers, without a log line per
  try), which replaces the seed;
- then each `host.added`, `host.updated` and `host.removed` event as it arrives (on queues of
  its own: every replica of a service hears every change);
- and the whole list again every `refresh_s`, which heals an event missed while the service
  was down or its queue was purged.

A removed host leaves the directory (`in`, `[]`, iteration: new work is refused there) but its
last record stays readable through `known(name)`: work already running there can still be
followed, signalled and read, so a removal never loses it. A re-added host is a host again.

The monitor's method is passed in by the service's composition root (`services.shared` imports
no service: `.importlinter`).
"""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from services.shared.bus import Bus, Teardown
from services.shared.cluster.background import cancel_and_wait
from services.shared.config import HostConfig
from services.shared.contracts import Envelope
from services.shared.errors import WardenError
from services.shared.rpc import Method

log = logging.getLogger("warden.hosts")

# Seconds between two full lists of the inventory (events carry the changes in between).
REFRESH_S = 30.0
# The first tries while the monitor does not answer yet: this soon, doubling up to REFRESH_S.
FIRST_RETRY_S = 0.5

HOST_EVENTS = ("host.added", "host.updated", "host.removed")


def host_config(record: Mapping[str, Any]) -> HostConfig:
    """A `HostConfig` from the monitor's `HostRecord` (a null `host_key` is "" in settings)."""
    return HostConfig(
        name=record["name"],
        address=record.get("address") or "",
        port=int(record.get("port") or 22),
        user=record.get("user") or "",
        key_file=record.get("key_file") or "",
        probe=record.get("probe") or "ssh",
        labels=tuple(record.get("labels") or ()),
        host_key=record.get("host_key") or "",
    )


class HostDirectory(Mapping[str, HostConfig]):
    """The hosts in the inventory now, by name (a read-only mapping), and the last record of
    hosts that left it (`known`)."""

    def __init__(
        self,
        seed: Iterable[HostConfig] = (),
        *,
        bus: Bus | None = None,
        list_hosts: Method | None = None,
        refresh_s: float = REFRESH_S,
    ) -> None:
        self._hosts: dict[str, HostConfig] = {host.name: host for host in seed}
        self._removed: dict[str, HostConfig] = {}
        self.bus = bus
        self.list_hosts = list_hosts
        self.refresh_s = refresh_s
        self.listed = False  # True once the monitor answered (the seed is replaced)
        # Called after each change, with the names that changed (e.g. to wake a scheduler).
        self.listeners: list[Callable[[frozenset[str]], None]] = []
        self._touched: set[str] = set()  # by events while a list call is under way
        self._event_times: dict[str, datetime] = {}  # by host: when its last event happened
        self._task: asyncio.Task[None] | None = None
        self._teardowns: list[Teardown] = []

    # -- the mapping ------------------------------------------------------------------------

    def __getitem__(self, name: str) -> HostConfig:
        return self._hosts[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._hosts)

    def __len__(self) -> int:
        return len(self._hosts)

    def known(self, name: str) -> HostConfig | None:
        """The host now, or the last record of one that was removed (None: never seen)."""
        return self._hosts.get(name) or self._removed.get(name)

    def was_removed(self, name: str) -> bool:
        return name not in self._hosts and name in self._removed

    def offers(self, name: str) -> bool:
        """Whether new work (a job, a booking) may go to `name`: a host of the inventory. Before
        the monitor answered, any host not known to be removed (the seed from [[hosts]] lacks
        the hosts added through the API)."""
        if name in self._hosts:
            return True
        return not self.listed and name not in self._removed

    def labels(self, name: str) -> tuple[str, ...]:
        host = self.known(name)
        return host.labels if host is not None else ()

    # -- changes ------------------------------------------------------------------------------

    def put(self, host: HostConfig) -> None:
        self._touched.add(host.name)
        if self._hosts.get(host.name) == host:
            return  # a redelivered event changes nothing twice
        self._hosts[host.name] = host
        self._removed.pop(host.name, None)
        self._changed({host.name})

    def remove(self, name: str) -> None:
        self._touched.add(name)
        host = self._hosts.pop(name, None)
        if host is not None:
            self._removed[name] = host
            self._changed({name})

    def replace(self, hosts: Iterable[HostConfig], *, keep: Iterable[str] = ()) -> None:
        """The whole list as the monitor answered it; the hosts named in `keep` stay as events
        left them (an event that came while the list was asked for is newer than the list)."""
        kept = set(keep)
        fresh = {host.name: host for host in hosts if host.name not in kept}
        changed = set()
        for name in [n for n in self._hosts if n not in fresh and n not in kept]:
            self._removed[name] = self._hosts.pop(name)
            changed.add(name)
        for name, host in fresh.items():
            if self._hosts.get(name) != host:
                self._hosts[name] = host
                self._removed.pop(name, None)
                changed.add(name)
        if changed:
            self._changed(changed)

    def apply(self, event_type: str, data: Mapping[str, Any], at: str | None = None) -> None:
        """One host.* event, which happened `at` (ISO time): the three event types come on
        queues of their own, so one may overtake another; an event older than the last one
        applied to its host changes nothing."""
        name = data["host"] if event_type == "host.removed" else data["host"]["name"]
        if at is not None:
            moment = datetime.fromisoformat(at)
            last = self._event_times.get(name)
            if last is not None and moment < last:
                return
            self._event_times[name] = moment
        if event_type == "host.removed":
            self.remove(data["host"])
        elif event_type in ("host.added", "host.updated"):
            self.put(host_config(data["host"]))

    def _changed(self, names: set[str]) -> None:
        log.info("hosts changed: %s", ", ".join(sorted(names)))
        for listener in self.listeners:
            listener(frozenset(names))

    # -- keeping it current ---------------------------------------------------------------------

    async def on_event(self, envelope: Envelope) -> None:
        self.apply(envelope.type, envelope.data, envelope.occurred_at)

    async def refresh(self) -> None:
        """Ask the monitor for the whole list once (raises WardenError when it does not answer)."""
        assert self.bus is not None and self.list_hosts is not None
        self._touched = set()
        answer = await self.list_hosts.call(self.bus)
        self.replace((host_config(r) for r in answer["hosts"]), keep=self._touched)
        if not self.listed:
            log.info("%d hosts listed by the monitor", len(self._hosts))
        self.listed = True

    async def start(self, service: str) -> None:
        """Keep the directory current in the background (a no-op without a bus): hear the
        host.* events first, then list. Each replica of `service` has queues of its own
        (transient): every copy hears every change; one missed while down is healed by the
        list at start."""
        if self.bus is None or self.list_hosts is None or self._task is not None:
            return
        suffix = secrets.token_hex(4)
        for event_type in HOST_EVENTS:
            consumer = f"{service}.{event_type.replace('.', '_')}-{suffix}"
            self._teardowns.append(
                await self.bus.subscribe(
                    "monitor", event_type, consumer, self.on_event, transient=True
                )
            )
        self._task = asyncio.create_task(self._run(), name="host directory")

    async def stop(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        teardowns, self._teardowns = self._teardowns, []
        for teardown in reversed(teardowns):
            await teardown()

    async def _run(self) -> None:
        wait_s, told = FIRST_RETRY_S, False
        while True:
            try:
                await self.refresh()
            except WardenError as err:
                if not told:  # one line, not one per try: the monitor may simply start later
                    log.info(
                        "the monitor's host list is not available (%s); %s meanwhile",
                        err.message,
                        "keeping the last one"
                        if self.listed
                        else f"using the {len(self._hosts)} hosts of [[hosts]]",
                    )
                    told = True
                await asyncio.sleep(wait_s if not self.listed else self.refresh_s)
                wait_s = min(wait_s * 2, self.refresh_s)
                continue
            except Exception:  # a bug: logged with its traceback, the directory goes on
                log.exception("listing the hosts failed")
            told, wait_s = False, FIRST_RETRY_S
            await asyncio.sleep(self.refresh_s)
