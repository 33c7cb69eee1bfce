"""GPUs known from before, for hosts the monitor shows none of now.

A host the monitor has no reading of (down since before the monitor or its replica started, or
whose GPUs did not answer in its latest reading) has no GPUs in the monitor's snapshot. Its GPUs
are still booked and named (`host:index`), so `GET /hosts` and `GET /gpus` list them as last
known: `present` false, no figures, the host's reachability. The reservations service keeps
every GPU the monitor ever discovered (`list_gpus`); it is asked at most every `REFRESH_S`, and
only while some host shows no GPUs.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from services.reservations import api as reservations_api
from services.shared.errors import WardenError
from services.shared.rpc import Method

log = logging.getLogger("warden.gateway")

REFRESH_S = 30.0

Rpc = Callable[[Method, Mapping[str, Any] | None], Awaitable[Any]]


def _without_gpus(raw: Mapping[str, Any]) -> bool:
    return not (raw.get("sample") or {}).get("gpus")


class KnownGpus:
    """The reservations service's GPUs by host, asked again at most every REFRESH_S."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.by_host: dict[str, list[dict[str, Any]]] = {}
        self._asked_at: float | None = None

    async def fill(self, rpc: Rpc, snapshot: dict[str, Any]) -> dict[str, Any]:
        """`snapshot` with `known_gpus` on each host that has no GPUs in it (as it is when no
        host lacks them, or none are known)."""
        hosts = snapshot.get("hosts") or []
        if not any(_without_gpus(raw) for raw in hosts):
            return snapshot
        await self._refresh(rpc)
        if not self.by_host:
            return snapshot
        filled = [
            {**raw, "known_gpus": self.by_host.get(raw["name"], [])} if _without_gpus(raw) else raw
            for raw in hosts
        ]
        return {**snapshot, "hosts": filled}

    async def _refresh(self, rpc: Rpc) -> None:
        now = self.clock()
        if self._asked_at is not None and now - self._asked_at < REFRESH_S:
            return
        self._asked_at = now
        try:
            listed = await rpc(reservations_api.LIST_GPUS, None)
        except WardenError as err:  # the hosts are shown all the same, without them
            log.debug("listing the known GPUs failed: %s", err.message)
            return
        by_host: dict[str, list[dict[str, Any]]] = {}
        for gpu in listed:
            if gpu.get("present", True):
                by_host.setdefault(gpu["host"], []).append(gpu)
        for gpus in by_host.values():
            gpus.sort(key=lambda gpu: gpu["index"])
        self.by_host = by_host
