"""The monitor's poll loops: every host on its own schedule, none waiting for another.

Each host has a task that wakes at its ticks (each host on its own phase of the interval, from
a hash of its name on the wall clock, so a thousand hosts do not all poll at once and a host
that moves to another monitor replica keeps its moments: `shards.py`), reads the host within
a deadline shorter than the interval, turns the result into events through `HostState`,
publishes them, keeps the latest state for `snapshot()` and hands the figures to the metrics
writer. A host that fails is retried with back-off; its ticks in between are skipped, not
counted as missed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from services.monitor.gpu_health import HealthRules, HealthState, HostHealth
from services.monitor.health_store import HealthKeeper, KeptHealth
from services.monitor.probe import GpuStatus, HostReading
from services.monitor.readers import HostReader
from services.monitor.shards import next_tick
from services.monitor.state import Event, HostState
from services.monitor.tsdb.base import GPU_METRICS, GpuPoint, HostPoint
from services.monitor.writer import MetricsWriter
from services.shared.errors import WardenError
from services.shared.remote.ssh import HostUnreachable

log = logging.getLogger("warden.monitor")

Publish = Callable[[str, dict[str, Any]], Awaitable[Any]]
PublishAll = Callable[[list[Event]], Awaitable[Any]]  # in order; may await confirms together


def percentile(values: Sequence[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]


@dataclass
class MonitorStats:
    polls: int = 0
    failures: int = 0
    missed_ticks: int = 0
    sample_ages_ms: deque[float] = field(default_factory=lambda: deque(maxlen=200_000))
    # Told each poll's duration and its sample's age in seconds (None: it failed); metrics.
    on_poll: Callable[[float, float | None], None] | None = None

    def as_dict(self) -> dict[str, Any]:
        ages = list(self.sample_ages_ms)
        return {
            "polls": self.polls,
            "failures": self.failures,
            "missed_ticks": self.missed_ticks,
            "sample_age_ms": {
                "count": len(ages),
                "p50": percentile(ages, 50),
                "p99": percentile(ages, 99),
                "max": max(ages) if ages else None,
            },
        }


def host_point(sample: dict[str, Any], at: datetime) -> HostPoint:
    return HostPoint(
        host=sample["host"],
        time=at,
        cpu_percent=sample["cpu_percent"],
        load_1m=sample["load_1m"],
        memory_used_mib=sample["memory_used_mib"],
        memory_total_mib=sample["memory_total_mib"],
        gpus=tuple(
            GpuPoint(uuid=gpu["uuid"], index=gpu["index"], **{f: gpu[f] for f in GPU_METRICS})
            for gpu in sample["gpus"]
        ),
    )


class Monitor:
    """The poll loops. Hosts come and go at runtime (`add`, `remove`, `replace`): the host
    list is the inventory's (see `hosts_admin.py`), changed without a restart."""

    def __init__(
        self,
        readers: Sequence[HostReader],
        publish: Publish,
        *,
        interval_s: float,
        poll_deadline_s: float,
        writer: MetricsWriter | None = None,
        labels: Mapping[str, Sequence[str]] | None = None,
        health_rules: HealthRules | None = None,
        health_store: HealthKeeper | None = None,
        publish_all: PublishAll | None = None,
        release: Callable[[HostReader], Awaitable[None]] | None = None,
    ) -> None:
        self.readers = {reader.name: reader for reader in readers}
        self.health_rules = health_rules or HealthRules()
        self.health: dict[str, HostHealth] = {}  # host -> its GPUs' health (gpu_health.py)
        self.health_store = health_store  # where it is kept across restarts (health_store.py)
        self.kept_health = None if health_store is None else KeptHealth(health_store)
        self.publish = publish
        self.publish_all = publish_all
        # Where the reader of a host no longer polled goes (the standby keeps some); else closed.
        self.release = release
        self.interval_s = interval_s
        self.poll_deadline_s = min(poll_deadline_s, interval_s * 0.95)
        self.writer = writer
        self.states = {reader.name: HostState(reader.name) for reader in readers}
        self.labels = {name: tuple(values) for name, values in (labels or {}).items()}
        self.stats = MonitorStats()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._publish_failing = False
        self._started = False
        self._due: dict[str, float] = {}  # the tick each loop waits for or polls
        self._drain_at: float | None = None  # no tick from then on is polled here
        self._until: dict[str, float] = {}  # hosts handed off: polled up to that tick only
        self._handing_off: set[asyncio.Task[None]] = set()

    def next_tick(self, name: str, after: float | None = None) -> float:
        """`name`'s first tick (monotonic) at or after `after` (default now), on its phase."""
        now_mono, now_wall = time.monotonic(), time.time()
        after_wall = now_wall + ((after if after is not None else now_mono) - now_mono)
        return next_tick(name, self.interval_s, after_wall) - now_wall + now_mono

    def hosts(self) -> list[str]:
        return list(self.readers)

    async def start(self) -> None:
        if self.writer is not None:
            self.writer.start()
        self._started = True
        for reader in self.readers.values():
            self._start_loop(reader, self.next_tick(reader.name))
        log.info(
            "monitoring %d host(s) every %gs",
            len(self.readers),
            self.interval_s,
            extra={"fields": {"hosts": ",".join(list(self.readers)[:20])}},
        )

    def _start_loop(self, reader: HostReader, first_tick: float) -> None:
        self._tasks[reader.name] = asyncio.create_task(
            self._poll_forever(reader, first_tick), name=f"poll {reader.name}"
        )

    async def add(
        self,
        reader: HostReader,
        labels: Sequence[str] = (),
        *,
        first_tick: float | None = None,
        state: HostState | None = None,
    ) -> None:
        """Watch one more host, polled at `first_tick` (monotonic; default at once), then on
        its phase. One of that name is replaced. `state`: what is known of it already (a
        host taken over from another replica), so its GPUs are not announced again."""
        if reader.name in self.readers:
            await self.remove(reader.name)
        self.readers[reader.name] = reader
        self.states[reader.name] = state or HostState(reader.name)
        self.labels[reader.name] = tuple(labels)
        if self._started:
            self._start_loop(reader, time.monotonic() if first_tick is None else first_tick)
        log.debug("now monitoring %s", reader.name)

    async def remove(self, *names: str) -> None:
        """Stop watching hosts: their loops end (all at once: hosts handed to another replica
        are not polled here a moment longer), their readers are released (`release`: their
        connections close, or stay as standby ones), their state goes."""
        tasks = [task for name in names if (task := self._tasks.pop(name, None)) is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        readers = []
        for name in names:
            reader = self.readers.pop(name, None)
            self.states.pop(name, None)
            self.labels.pop(name, None)
            self.health.pop(name, None)
            self._due.pop(name, None)
            self._until.pop(name, None)
            if reader is not None:
                readers.append(reader)
        release = self.release or (lambda reader: reader.close())
        await asyncio.gather(*(release(reader) for reader in readers), return_exceptions=True)
        if len(readers) == 1:
            log.info("no longer monitoring %s", readers[0].name)
        elif readers:
            log.info("no longer monitoring %d hosts", len(readers))

    async def _handed_off(self, name: str, loop: asyncio.Task[Any] | None) -> None:
        if loop is not None and self._tasks.get(name) is loop:  # not added again since
            await self.remove(name)

    def hand_off(self, names: Sequence[str], at: float) -> None:
        """Stop polling `names` from their first tick at or after `at` (monotonic) on, when
        another replica starts; a host's tick before it is still polled here."""
        for name in names:
            if name in self._tasks:
                self._until[name] = at

    async def drain(self) -> float:
        """Stop polling: no tick from now on is polled here, a poll of an earlier one (under
        way, or due and about to start) is let finish. Returns that moment (wall clock), from
        which another replica takes the hosts over without a gap or a double poll."""
        drain_at = self._drain_at = time.monotonic()
        tasks, self._tasks = self._tasks, {}
        finishing = []
        for name, task in tasks.items():
            if self._due.get(name, drain_at) < drain_at:
                finishing.append(task)
            else:
                task.cancel()
        if finishing:
            await asyncio.wait(finishing, timeout=self.poll_deadline_s + 1.0)
        for task in tasks.values():
            task.cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return time.time() - (time.monotonic() - drain_at)

    def relabel(self, name: str, labels: Sequence[str]) -> None:
        if name in self.readers:
            self.labels[name] = tuple(labels)

    async def stop(self) -> None:
        tasks, self._tasks = list(self._tasks.values()), {}
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for reader in self.readers.values():
            with contextlib.suppress(Exception):
                await reader.close()
        if self.writer is not None:
            await self.writer.close()

    async def _poll_forever(self, reader: HostReader, first_tick: float) -> None:
        state = self.states[reader.name]  # this loop's own: a replaced host gets a new one
        tick = first_tick
        while True:
            if self._drain_at is not None and tick >= self._drain_at:
                return
            self._due[reader.name] = tick
            await asyncio.sleep(max(0.0, tick - time.monotonic()))
            late = time.monotonic() - tick
            if late >= self.interval_s:
                # The loop was too busy to start this poll in its own interval.
                skipped = int(late // self.interval_s)
                self.stats.missed_ticks += skipped
                tick += skipped * self.interval_s
            if self._drain_at is not None and tick >= self._drain_at:
                return
            if tick >= self._until.get(reader.name, math.inf):
                # Handed off: the other replica polls this tick. Removed by another task,
                # which waits for this one to end.
                ending = asyncio.current_task()
                task = asyncio.create_task(self._handed_off(reader.name, ending))
                self._handing_off.add(task)
                task.add_done_callback(self._handing_off.discard)
                return
            if state.reachable is False and time.monotonic() < state.retry_at:
                tick += self.interval_s
                continue
            await self.poll_once(reader, state, tick)
            # The next tick on the host's phase (a first poll at once may be off it: then the
            # next tick comes sooner than an interval, rather than a tick being skipped).
            tick = self.next_tick(reader.name, tick + self.interval_s / 100)

    async def poll_once(self, reader: HostReader, state: HostState, tick: float) -> None:
        self.stats.polls += 1
        began = time.monotonic()
        at = datetime.now(UTC)
        try:
            try:
                # Readers keep their own deadline; this one guards against one that does not.
                async with asyncio.timeout(self.poll_deadline_s + 0.5):
                    reading = await reader.read(self.poll_deadline_s)
            except TimeoutError as err:
                raise HostUnreachable(f"{reader.name}: timed out", {"reason": "timed out"}) from err
        except HostUnreachable as err:
            if err.details.get("waiting"):
                # Its connection waits for a turn among this replica's handshakes: not polled,
                # not down either (a tick missed, as when the loop is too busy).
                self.stats.missed_ticks += 1
                return
            events = self._unreachable(reader.name, state, err, at)
        except Exception:
            # A bug reading one host must not stop its loop (or the others).
            self.stats.failures += 1
            log.exception("reading %s failed", reader.name)
            return
        else:
            was_down = state.reachable is False
            events = state.on_reading(reading, at)
            events += await self._health_events(reader.name, state, reading, at)
            if was_down:
                log.info("%s is reachable again", reader.name)
        await self._publish_all(events)
        age_s = None
        if state.reachable and state.last_sample is not None:
            age_s = time.monotonic() - tick
            self.stats.sample_ages_ms.append(age_s * 1000)
            if self.writer is not None:
                self.writer.offer(host_point(state.last_sample, at))
        if self.stats.on_poll is not None:
            self.stats.on_poll(time.monotonic() - began, age_s)

    async def _host_health(self, name: str) -> HostHealth:
        """The health of `name`'s GPUs: kept here, else as the database kept it."""
        health = self.health.get(name)
        if health is not None:
            return health
        health = HostHealth(name, self.health_rules)
        if self.kept_health is not None:
            try:
                for uuid, (index, kept) in (await self.kept_health.of(name)).items():
                    health.gpus[uuid], health.index[uuid] = kept, index
            except Exception as err:  # its GPUs start from their next reading
                log.warning("reading the GPU health of %s failed: %s", name, err)
        return self.health.setdefault(name, health)

    async def _keep_health(self, health: HostHealth, before: Mapping[str, Any]) -> None:
        """Save the GPUs whose health changed (an ok GPU seen the first time has no row)."""
        if self.health_store is None:
            return
        for uuid, after in health.gpus.items():
            was = before.get(uuid)
            if after == was or (was is None and after.state is HealthState.OK):
                continue
            try:
                await self.health_store.save(health.host, uuid, health.index.get(uuid), after)
            except Exception as err:  # kept in memory; saved at its next change
                log.warning("saving the health of GPU %s failed: %s", uuid, err)

    async def _health_events(
        self, name: str, state: HostState, reading: HostReading, at: datetime
    ) -> list[Event]:
        """`gpu.health_changed` for the GPUs whose health this reading changed."""
        health = await self._host_health(name)
        before = dict(health.gpus)
        known = {uuid: gpu.index for uuid, gpu in state.gpus.items()}
        error = reading.gpu_error if reading.gpu_status is GpuStatus.ERROR else None
        events = health.observe(known, [g.uuid for g in reading.gpus], reading.health, error, at)
        await self._keep_health(health, before)
        for _, data in events:
            if data["state"] != "ok":
                log.warning(
                    "GPU %s:%s is now %s: %s", name, data["index"], data["state"], data["reason"]
                )
            elif data["previous"] is not None:
                log.info("GPU %s:%s is ok again", name, data["index"])
        return events

    def _unreachable(
        self, name: str, state: HostState, err: HostUnreachable, at: datetime
    ) -> list[Event]:
        self.stats.failures += 1
        reason = str(err.details.get("reason") or err.message)
        events = state.on_failure(
            reason,
            at,
            time.monotonic(),
            self.interval_s,
            back_off=bool(err.details.get("needs_a_person")),
        )
        if events:  # a transition: one log line per outage, not per tick
            log.warning("%s is unreachable: %s", name, reason)
        return events

    async def _publish_all(self, events: list[Event]) -> None:
        try:
            if self.publish_all is not None and len(events) > 1:
                await self.publish_all(events)
            else:
                for event_type, data in events:
                    await self.publish(event_type, data)
        except WardenError as err:
            if not self._publish_failing:
                self._publish_failing = True
                log.warning("publishing monitor events failed: %s", err.message)
            return
        if self._publish_failing:
            self._publish_failing = False
            log.info("publishing monitor events works again")

    def snapshot(self, host: str | None = None) -> dict[str, Any]:
        """The latest state of every host (or one): figures, GPUs, processes, reachability."""
        hosts = [
            host_entry(name, self.labels.get(name, ()), state, self.health.get(name))
            for name, state in self.states.items()
            if host is None or name == host
        ]
        return {"generated_at": datetime.now(UTC).isoformat(), "hosts": hosts}


def host_entry(
    name: str, labels: Sequence[str], state: HostState, health: HostHealth | None = None
) -> dict[str, Any]:
    """One host of `snapshot`; `gpu_health`: uuid -> {index, state, reason, since} of the
    GPUs whose health was read (a lost GPU too, though no figures of it are)."""
    return {
        "name": name,
        "labels": list(labels),
        "reachable": state.reachable,
        "down_since": state.down_since.isoformat() if state.down_since else None,
        "down_reason": state.down_reason,
        "last_seen": state.last_seen.isoformat() if state.last_seen else None,
        "sample": state.last_sample,
        "processes": state.last_processes,
        "topology": state.topology,
        "gpu_health": health.entries() if health is not None else {},
    }
