"""The inventory's commands (LIST/ADD/UPDATE/REMOVE/CHECK_HOST): each writes the database,
brings the poll loops in line (`Monitor.add/remove/relabel`) and publishes host.added /
host.updated / host.removed, so jobs, violations and the gateway follow without a restart.

Commands run one at a time (a lock): the row, the loops and the event of one change are never
interleaved with another's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import asyncssh

from services.monitor.host_check import check_host
from services.monitor.host_store import HostStore
from services.monitor.inventory import (
    API,
    LOCAL,
    InventoryHost,
    StoredHost,
    diff_hosts,
    host_from,
    problems,
)
from services.monitor.login_proof import prove_login
from services.monitor.monitor import Monitor
from services.monitor.readers import HostReader
from services.shared.config import HostConfig
from services.shared.errors import (
    AlreadyExists,
    InvalidRequest,
    NotFound,
    StateConflict,
    WardenError,
)
from services.shared.ssh import SshOptions

log = logging.getLogger("warden.monitor")

Publish = Callable[[str, dict[str, Any]], Awaitable[Any]]
ReaderFor = Callable[[HostConfig], HostReader]

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
        monitor: Monitor,
        publish: Publish,
        reader_for: ReaderFor,
        options: SshOptions,
        hosts: Sequence[InventoryHost],
    ) -> None:
        self.store = store
        self.monitor = monitor
        self.publish = publish
        self.reader_for = reader_for
        self.options = options
        self.hosts = {host.name: host for host in hosts}
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
        running = {old.name: old} if old is not None else {}
        diff = diff_hosts(running, [new] if new is not None else [])
        for name in diff.removed:
            await self.monitor.remove(name)
        for host in [*diff.added, *diff.changed]:
            await self.monitor.add(self.reader_for(host), host.labels)
        for host in diff.relabeled:
            self.monitor.relabel(host.name, host.labels)

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
