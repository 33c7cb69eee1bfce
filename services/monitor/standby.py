"""Connections kept open to the hosts this monitor replica would take over.

A replica that takes over a dead peer's hosts opens an SSH connection to each at its first
poll, and a handshake costs the CPU of several polls: a thousand of them take seconds of both
cores, and the takeover waits for them. So, with two replicas or more, each keeps a connection
open to the hosts it would gain if the replica polling them left (their runner-up in the
rendezvous hashing, `shards.runner_up`): a takeover then costs the polls only. These standby
connections are opened an interval after the replica's own first polls, one at a time and at
most `per_s` a second, so that they take a small share of the CPU the polls need; a host this
replica hands to another keeps its connection here when this replica is its runner-up. One
that cannot be opened, or closes later (the host restarted), is tried again every `recheck_s`
(a minute), and until then a takeover's first poll opens it, as without a standby.
`[monitor] standby_connections = false` keeps none.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Mapping

from services.monitor.readers import HostReader
from services.shared.cluster.background import cancel_and_wait
from services.shared.config import HostConfig
from services.shared.remote.shell import HostUnreachable

log = logging.getLogger("warden.monitor")

ReaderFor = Callable[[HostConfig], HostReader]
RECHECK_S = 60.0  # standby connections not open (closed, or could not be opened) tried again


class Standby:
    def __init__(
        self,
        reader_for: ReaderFor,
        *,
        per_s: float,
        connect_timeout_s: float,
        enabled: bool = True,
        recheck_s: float = RECHECK_S,
    ) -> None:
        self.reader_for = reader_for
        self.recheck_s = recheck_s
        self.per_s = per_s
        self.connect_timeout_s = connect_timeout_s
        self.enabled = enabled
        self.hosts: dict[str, HostConfig] = {}  # the standby hosts, as the inventory has them
        self.readers: dict[str, HostReader] = {}  # theirs, opened or being opened
        self._not_before = 0.0  # monotonic: no connection is opened before
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._opening: dict[HostReader, asyncio.Task[None]] = {}

    async def update(self, hosts: Mapping[str, HostConfig], *, not_before: float = 0.0) -> None:
        """The standby hosts are `hosts` now: the readers of the others are closed, the new
        ones' connections opened from `not_before` (monotonic) on."""
        wanted = dict(hosts) if self.enabled else {}
        dropped = [
            self.readers.pop(name)
            for name in list(self.readers)
            if wanted.get(name) != self.readers[name].config
        ]
        self.hosts = wanted
        self._not_before = not_before
        if wanted and self._task is None:
            self._task = asyncio.create_task(self._open_pending(), name="standby connections")
        self._wake.set()
        await self._close(dropped)

    async def take(self, host: HostConfig) -> HostReader | None:
        """The reader kept for `host`, now the caller's (None when none is kept for it as it is
        configured); its `connected` says whether the first poll needs a handshake (one being
        opened goes on opening, and the first poll waits for it)."""
        reader = self.readers.pop(host.name, None)
        if reader is not None and reader.config != host:
            await self._close([reader])
            return None
        return reader

    async def keep(self, reader: HostReader) -> None:
        """A reader this replica no longer polls with: kept when its host is a standby host
        (configured as the reader reads it), closed otherwise."""
        name = reader.name
        if name in self.hosts and reader.config == self.hosts[name] and name not in self.readers:
            self.readers[name] = reader
            self._wake.set()  # opened if it is not (never polled, or its connection closed)
            return
        await reader.close()

    async def close(self) -> None:
        task, self._task = self._task, None
        await cancel_and_wait(task)
        readers, self.readers = list(self.readers.values()), {}
        self.hosts = {}
        await self._close(readers)

    def connected(self) -> int:
        return sum(1 for reader in self.readers.values() if reader.connected)

    async def _open_pending(self) -> None:
        """A pass over what is to open, then a wait for a change (`_wake`) or the recheck: one
        that failed is not tried again before either."""
        while True:
            self._wake.clear()  # a change during the pass: another pass at once
            for name in [name for name in self.hosts if self._to_open(name)]:
                await asyncio.sleep(max(self._not_before - time.monotonic(), 0.0))
                if name not in self.hosts or not self._to_open(name):
                    continue  # taken, dropped, or opened since the pass began
                reader = self.readers.get(name) or self.reader_for(self.hosts[name])
                self.readers[name] = reader
                began = time.monotonic()
                task = self._opening[reader] = asyncio.create_task(
                    self._open(reader), name=f"standby {name}"
                )
                await asyncio.wait([task])  # one at a time, at most `per_s` a second
                await asyncio.sleep(max(1.0 / self.per_s - (time.monotonic() - began), 0.0))
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.recheck_s):
                    await self._wake.wait()

    def _to_open(self, name: str) -> bool:
        """Whether a standby host still needs its connection opened."""
        reader = self.readers.get(name)
        return reader is None or not (reader.connected or reader in self._opening)

    async def _open(self, reader: HostReader) -> None:
        try:
            await reader.connect(self.connect_timeout_s)
        except HostUnreachable as err:  # its first poll, if it comes, connects (or reports)
            log.debug("no standby connection to %s: %s", reader.name, err.message)
        except Exception:  # the same, but worth a look
            log.exception("opening a standby connection to %s failed", reader.name)
        finally:
            self._opening.pop(reader, None)

    async def _close(self, readers: list[HostReader]) -> None:
        """Close readers no longer kept, stopping the opening of theirs first (a connection
        it finished afterwards would be left open)."""
        for reader in readers:
            await cancel_and_wait(self._opening.pop(reader, None))
        await asyncio.gather(*(reader.close() for reader in readers), return_exceptions=True)
