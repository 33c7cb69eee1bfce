"""The inventory's commands (LIST/ADD/UPDATE/REMOVE/CHECK_HOST): each writes the database,
brings the poll loops in line (`Sharding.sync`: the replica that owns the host polls it) and
publishes host.added / host.updated / host.removed, so jobs, violations, the gateway and the
other monitor replicas follow without a restart (`refresh`, on those events, and `reload`,
every 30 s, read the database again).

Commands run one at a time (a lock): the row, the loops and the event of one change are never
interleaved with another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Collection
from typing import Any, Protocol

import asyncssh

from services.monitor.hosts.host_check import check_host
from services.monitor.hosts.host_store import HostStore
from services.monitor.hosts.inventory import (
    API,
    LOCAL,
    InventoryHost,
    StoredHost,
    active,
    host_from,
    problems,
)
from services.monitor.hosts.login_proof import prove_login
from services.shared.config import HostConfig
from services.shared.errors import (
    AlreadyExists,
    InvalidRequest,
    NotFound,
    StateConflict,
    WardenError,
)
from services.shared.remote.ssh import SshOptions

log = logging.getLogger("warden.monitor")

Publish = Callable[[str, dict[str, Any]], Awaitable[Any]]


class Polling(Protocol):
    async def sync(self, *, now: Collection[str] = ()) -> None: ...


CHECK_TIMEOUT_S = 30.0
PROVE_TIMEOUT_S = 20.0  # per login; the method's deadline allows two in a row


def _valid(host: HostConfig) -> HostConfig:
    found = problems(host)
    if host.host_key:
        try:
            asyncssh.import_public_key(host.host_key)
        except (asyncssh.KeyImportError, ValueError):
            found["host_key"] = "not a public key line (`ssh-ed25519 AAAA...`, as check shows it)"
    if found:
        summary = "; ".join(f"{key}: {text}" for key, text in found.items())
        raise InvalidRequest(f"invalid host: {summary}", {"errors": found})
    return host


class HostsAdmin:
    def __init__(
        self,
        store: HostStore,
        polling: Polling,
        publish: Publish,
        options: SshOptions,
        hosts: dict[str, InventoryHost],
        local: HostConfig | None = None,
    ) -> None:
        self.store = store
        self.polling = polling
        self.publish = publish
        self.options = options
        self.hosts = hosts  # shared with the sharding, which polls this replica's part
        self.local = local
        self._lock = asyncio.Lock()

    def records(self) -> list[dict[str, Any]]:
        return [self.hosts[name].record() for name in sorted(self.hosts)]

    def _get(self, name: str) -> InventoryHost:
        found = self.hosts.get(name)
        if found is None:
            raise NotFound(f"no host named {name!r} in the inventory", {"host": name})
        return found

    @staticmethod
    def _not_local(found: InventoryHost, doing: str) -> None:
        if found.source == LOCAL:
            raise StateConflict(
                f"{found.name} is this machine, watched through NVML: it cannot be {doing} "
                "here (set [monitor] local_nvml in the config instead)",
                {"host": found.name, "source": LOCAL},
            )

    async def _poll(self, old: HostConfig | None, new: HostConfig | None) -> None:
        await self.polling.sync(now=[new.name] if new is not None else [])

    async def refresh(self, name: str) -> None:
        """Another replica changed `name` (its host.* event): read its row again."""
        async with self._lock:
            row = await self.store.get(name)
            found = None if row is None or row.removed else InventoryHost(row.host, row.source)
            current = self.hosts.get(name)
            if (current is not None and current.source == LOCAL) or found == current:
                return  # this replica's own change, or this machine's NVML
            if found is None:
                del self.hosts[name]
            else:
                self.hosts[name] = found
            await self._poll(current.host if current else None, found.host if found else None)

    async def reload(self) -> None:
        """The whole inventory again (heals a host.* event this replica missed)."""
        async with self._lock:
            wanted = {host.name: host for host in active(await self.store.all(), self.local)}
            changed = [n for n in {*wanted, *self.hosts} if wanted.get(n) != self.hosts.get(n)]
            if not changed:
                return
            self.hosts.clear()
            self.hosts.update(wanted)
            await self.polling.sync(now=[n for n in changed if n in wanted])

    async def _announce(self, event_type: str, data: dict[str, Any]) -> None:
        # Under the lock: events of two changes go out in the order they were made. The
        # change stands if the bus fails; consumers also refresh with LIST_HOSTS.
        try:
            await self.publish(event_type, data)
        except WardenError as err:
            log.warning("publishing %s failed: %s", event_type, err.message)

    async def add(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            name = args["name"]
            if name in self.hosts:
                raise AlreadyExists(f"a host named {name!r} is in the inventory", {"host": name})
            host = _valid(host_from(args))
            await self.store.put(StoredHost(host, API))
            added = self.hosts[name] = InventoryHost(host, API)
            await self._poll(None, host)
            record = added.record()
            await self._announce("host.added", {"host": record})
        log.info("host %s added (%s)", name, host.probe)
        return record

    async def update(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            found = self._get(args["name"])
            self._not_local(found, "edited")
            host = _valid(host_from(args, found.host))
            if host == found.host:
                return found.record()  # nothing changed: no event, no restart
            # Edited through the API: from now on it no longer follows [[hosts]].
            await self.store.put(StoredHost(host, API))
            changed = self.hosts[host.name] = InventoryHost(host, API)
            await self._poll(found.host, host)
            record = changed.record()
            await self._announce("host.updated", {"host": record})
        log.info("host %s changed", host.name)
        return record

    async def remove(self, args: dict[str, Any]) -> dict[str, Any]:
        async with self._lock:
            found = self._get(args["name"])
            self._not_local(found, "removed")
            # A tombstone: a host removed here is not seeded again from [[hosts]].
            await self.store.put(StoredHost(found.host, found.source, removed=True))
            del self.hosts[found.name]
            await self._poll(found.host, None)
            record = found.record()
            await self._announce("host.removed", {"host": found.name})
        log.info("host %s removed", found.name)
        return record

    async def check(self, args: dict[str, Any]) -> dict[str, Any]:
        name = args.get("name")
        if name is not None and name in self.hosts:
            host = host_from(args, self.hosts[name].host)
        else:
            if name is None and not args.get("address") and args.get("probe") != "nvml":
                raise InvalidRequest(
                    "name a host of the inventory, or give a candidate's address and user",
                    {"errors": {"address": "required without a name"}},
                )
            if name is not None and not args.get("address") and args.get("probe") != "nvml":
                raise NotFound(f"no host named {name!r} in the inventory", {"host": name})
            host = host_from({**args, "name": name or "candidate"})
        _valid(host)
        return await check_host(host, self.options, CHECK_TIMEOUT_S)

    async def prove_login(self, args: dict[str, Any]) -> dict[str, Any]:
        """PROVE_LOGIN on the named host, or on every SSH host of the inventory."""
        name = args.get("host")
        if name is not None:
            found = self._get(name).host
            if found.probe != "ssh":
                raise InvalidRequest(
                    f"{name} is watched through NVML, not logged in to: name an SSH host",
                    {"errors": {"host": "not an SSH host"}},
                )
            hosts = [found]
        else:
            hosts = [h.host for h in self.hosts.values() if h.host.probe == "ssh"]
        return await prove_login(hosts, args["username"], self.options, PROVE_TIMEOUT_S)
