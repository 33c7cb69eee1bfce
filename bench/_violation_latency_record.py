"""What bench/violation_latency.py records, by (host, pid): process starts, the first
`processes.observed` listing each, `violation.opened` (a bus subscriber) and the first webhook
delivery (a local aiohttp receiver, `webhook_receiver`), and the event loop's lag (`LoopLag`).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import _common as common
from aiohttp import web

from services.shared.bus.inproc import InProcessBus
from services.shared.contracts import Envelope

LAG_TICK_S = 0.05
HOOK_PATH = "/hooks/bench"
Key = tuple[str, int]  # (host, pid)


@dataclass
class Recorder:
    """What the bench saw, by (host, pid), all times `time.time()` seconds."""

    started: dict[Key, float] = field(default_factory=dict)
    observed_at: dict[Key, float] = field(default_factory=dict)  # poll start of first sighting
    opened: dict[Key, float] = field(default_factory=dict)
    webhook: dict[Key, float] = field(default_factory=dict)
    opened_events: int = 0
    opened_unknown: int = 0  # violation.opened for no process of this bench
    deliveries: int = 0
    deliveries_unknown: int = 0
    reservation_events: int = 0

    def complete(self) -> bool:
        return all(k in self.opened and k in self.webhook for k in self.started)

    def latencies(self, seen: dict[Key, float], deadline_s: float) -> tuple[common.Latencies, int]:
        """Receive time - start time of all seen (late ones too); and how many were not seen
        within the deadline."""
        samples, missed = [], 0
        for key, start in self.started.items():
            at = seen.get(key)
            if at is not None:
                samples.append((at - start) * 1000)
            if at is None or at - start > deadline_s:
                missed += 1
        return common.Latencies(samples), missed

    def between(self, first: dict[Key, float], then: dict[Key, float]) -> common.Latencies:
        ms = [(then[k] - first[k]) * 1000 for k in self.started if k in first and k in then]
        return common.Latencies(ms)


class LoopLag:
    """How late a 50 ms ticker wakes up: the event loop's queueing delay (ms)."""

    def __init__(self) -> None:
        self.samples_ms: list[float] = []
        self.recording = False
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="bench loop lag")

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            wanted = loop.time() + LAG_TICK_S
            await asyncio.sleep(LAG_TICK_S)
            if self.recording:
                self.samples_ms.append(max(0.0, loop.time() - wanted) * 1000)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


def _pids(incident: dict[str, Any]) -> list[int]:
    """The pids of a json webhook body's `incident` (its `pids`, else its `processes`)."""
    if isinstance(incident.get("pids"), list):
        return [int(p) for p in incident["pids"]]
    return [int(p["pid"]) for p in incident.get("processes") or [] if "pid" in p]


async def webhook_receiver(rec: Recorder) -> web.AppRunner:
    async def hook(request: web.Request) -> web.Response:
        at = time.time()
        body = await request.json()
        rec.deliveries += 1
        incident = body.get("incident") or {}
        host = incident.get("host")
        known = False
        for pid in _pids(incident):
            key = (host, pid)
            if key in rec.started:
                known = True
                rec.webhook.setdefault(key, at)
        if not known:
            rec.deliveries_unknown += 1
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post(HOOK_PATH, hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner


async def subscribe_recorders(bus: InProcessBus, rec: Recorder) -> list[Callable[[], Any]]:  # noqa: C901 - one closure per event type it records
    async def opened(envelope: Envelope) -> None:
        at = time.time()
        rec.opened_events += 1
        data = envelope.data
        hit = False
        for pid in data.get("pids") or []:
            key = (data.get("host"), int(pid))
            if key in rec.started:
                hit = True
                rec.opened.setdefault(key, at)
        if not hit:
            rec.opened_unknown += 1

    async def observed(envelope: Envelope) -> None:
        data = envelope.data
        host = data.get("host")
        when: float | None = None
        for proc in data.get("processes") or ():
            key = (host, proc.get("pid"))
            if key in rec.started and key not in rec.observed_at:
                if when is None:
                    when = datetime.fromisoformat(data["observed_at"]).timestamp()
                rec.observed_at[key] = when

    async def reservation(envelope: Envelope) -> None:
        if envelope.type == "reservation.created":
            rec.reservation_events += 1

    return [
        await bus.subscribe("violations", "violation.opened", "bench.opened", opened),
        await bus.subscribe("monitor", "processes.observed", "bench.observed", observed),
        await bus.subscribe("reservations", "reservation.*", "bench.reservations", reservation),
    ]
