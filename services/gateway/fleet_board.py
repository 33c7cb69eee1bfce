"""The hosts and GPUs as `GET /hosts` and `GET /gpus` serve them, kept in the app.

`GET /gpus` is the page every client polls (64 clients on 400 GPUs, with bookings coming in all
along), so its answers are served from a `FleetBoard` kept in the app rather than composed per
request: the monitor's snapshot at most `MAX_AGE_S` old, and each GPU's current and next
reservation from the gateway's calendar copy (`CalendarView`), which the `reservation.*` events
and the gateway's own writes keep current and which says which GPUs they changed, so a booking
shows as soon as the gateway hears of it. Each GPU is serialised once as admins see it and once
as outsiders do (private fields of reservations emptied by `reservation_for`); the owners and
guests of its reservations get it made for them. A GPU is serialised again only when its
figures or reservations change. An answer is put together from those pieces once per view and
composition.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import operator
import time
from collections.abc import Callable, Iterable, Mapping, Set
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from services.gateway.auth import Caller
from services.gateway.calendar import CalendarView
from services.gateway.known_gpus import KnownGpus
from services.gateway.visibility import reservation_for
from services.monitor import api as monitor_api
from services.reservations import api as reservations_api
from services.shared import fastjson
from services.shared.contracts import GpuSample, HostSampled
from services.shared.errors import NotFound
from services.shared.gpu_labels import gpu_labels, union
from services.shared.rpc import Method

log = logging.getLogger("warden.gateway")

# The monitor's figures are served this old at most: they are asked for again by the first
# caller that finds them REFRESH_AFTER_S old (one RPC of a few milliseconds, shared).
MAX_AGE_S = 1.0
REFRESH_AFTER_S = 0.6
NEXT_WITHIN = timedelta(days=7)  # `next_reservation`: the next one starting within this
# Serialised answers kept per composition (views, hosts); beyond this they are not kept.
MAX_ANSWERS = 256

# The figures of a GPU and of a host, from the monitor's samples (contracts.GpuSample and
# contracts.HostSampled): each null when the GPU or host does not report it (never 0).
GPU_FIGURES: tuple[str, ...] = tuple(
    name for name in GpuSample._declared_fields if name not in ("uuid", "index", "name")
)
HOST_FIGURES: tuple[str, ...] = tuple(
    name for name in HostSampled._declared_fields if name not in ("host", "gpus")
)


_dumps = fastjson.dumps


def _participants(reservations: Iterable[dict[str, Any]]) -> set[str]:
    names: set[str] = set()
    for reservation in reservations:
        names.add(reservation["owner"])
        names.update(reservation.get("guests") or ())
    return names


def _process(entry: dict[str, Any]) -> dict[str, Any]:
    return {
        "pid": entry.get("pid"),
        "user": entry.get("user"),
        "command": entry.get("command", ""),
        "used_memory_mib": entry.get("used_memory_mib"),
        "started_at": entry.get("started_at"),
    }


def _health(entry: dict[str, Any] | None) -> dict[str, Any]:
    """A GPU's health as the monitor judged it; ok (since null) before it was read."""
    if entry is None:
        return {"state": "ok", "reason": None, "since": None}
    return {"state": entry["state"], "reason": entry.get("reason"), "since": entry.get("since")}


Holders = Callable[[str], tuple[dict[str, Any] | None, dict[str, Any] | None]]


def _last_known(known: dict[str, Any]) -> dict[str, Any]:
    """A GPU of a host the snapshot shows no GPUs of, as known from before: no figures."""
    gpu = {"uuid": known["uuid"], "host": known["host"], "index": known["index"]}
    gpu["name"] = known.get("name")
    for figure in GPU_FIGURES:
        gpu[figure] = None
    gpu["memory_total_mib"] = known.get("memory_total_mib")  # a fact of the GPU: its labels say it
    return gpu


def compose_hosts(snapshot: dict[str, Any], holders: Holders) -> list[dict[str, Any]]:
    """HostStates from the monitor's snapshot; `holders(uuid)` gives a GPU's reservation now
    and its next one (unfiltered: their private fields are still there). A host with no GPUs
    in its sample shows those known from before (`known_gpus`, see `known_gpus.py`), with
    `present` false. Pure."""
    hosts = []
    for raw in snapshot.get("hosts") or ():
        sample = raw.get("sample") or {}
        sampled_at = sample.get("sampled_at")
        reachable = raw.get("reachable")
        by_gpu: dict[str, list[dict[str, Any]]] = {}
        for entry in raw.get("processes") or ():
            process = _process(entry)
            uuids = entry.get("gpu_uuids") or [entry.get("gpu_uuid")]
            for uuid in dict.fromkeys(uuids):
                by_gpu.setdefault(uuid, []).append(process)
        gpus = []
        health = raw.get("gpu_health") or {}
        readings = list(sample.get("gpus") or ())
        listed = {reading.get("uuid") for reading in readings}
        # A GPU the driver lost has no figures: listed from its health, after the others.
        readings += [
            {"uuid": uuid, "index": entry.get("index")}
            for uuid, entry in health.items()
            if uuid not in listed and entry.get("state") == "failed"
        ]
        for reading in readings or [_last_known(known) for known in raw.get("known_gpus") or ()]:
            uuid = reading.get("uuid")
            gpu = {"uuid": uuid, "host": raw["name"], "index": reading.get("index")}
            gpu["name"] = reading.get("name")
            for figure in GPU_FIGURES:
                gpu[figure] = reading.get(figure)
            gpu["labels"] = gpu_labels(gpu["name"], gpu.get("memory_total_mib"))
            gpu["present"] = uuid in listed
            gpu["processes"] = by_gpu.get(uuid, [])
            gpu["reservation"], gpu["next_reservation"] = holders(uuid)
            gpu["reachable"] = reachable
            gpu["sampled_at"] = sampled_at
            gpu["health"] = _health(health.get(uuid))
            gpus.append(gpu)
        host = {
            "name": raw["name"],
            "labels": list(raw.get("labels") or ()),
            "gpu_labels": union(gpu["labels"] for gpu in gpus),
            "reachable": reachable,
            "down_since": raw.get("down_since"),
            "down_reason": raw.get("down_reason"),
            "last_seen": raw.get("last_seen"),
        }
        for figure in HOST_FIGURES:
            host[figure] = sample.get(figure)
        host["topology"] = raw.get("topology")
        host["gpus"] = gpus
        hosts.append(host)
    return hosts


_SERIALS = itertools.count(1)

# Whoever takes part in no reservation: the view every outsider shares.
OUTSIDER = Caller(username="", is_admin=False)


def _gpu_for(caller: Caller, gpu: dict[str, Any]) -> dict[str, Any]:
    held, following = gpu["reservation"], gpu["next_reservation"]
    if held is None and following is None:
        return gpu
    return {
        **gpu,
        "reservation": None if held is None else reservation_for(caller, held),
        "next_reservation": None if following is None else reservation_for(caller, following),
    }


class ShownGpu:
    """A GPU serialised once as admins see it and once as outsiders do (the same bytes when
    nothing of it is private); each owner or guest of its reservations gets it made for them
    (`reservation_for`) on their first request, and kept while the GPU does not change."""

    __slots__ = ("_theirs", "data", "full", "outsider", "parties")

    def __init__(self, gpu: dict[str, Any]) -> None:
        self.data = gpu
        self.full = _dumps(gpu)
        shown = _gpu_for(OUTSIDER, gpu)
        self.outsider = self.full if shown is gpu else _dumps(shown)
        self.parties: frozenset[str] = frozenset()
        if self.outsider != self.full:
            held = [r for r in (gpu["reservation"], gpu["next_reservation"]) if r is not None]
            self.parties = frozenset(_participants(held))
        self._theirs: dict[str, bytes] = {}

    def for_caller(self, caller: Caller) -> bytes:
        if caller.is_admin:
            return self.full
        if caller.username not in self.parties:
            return self.outsider
        found = self._theirs.get(caller.username)
        if found is None:
            found = self._theirs[caller.username] = _dumps(_gpu_for(caller, self.data))
        return found

    def with_holders(
        self, held: dict[str, Any] | None, following: dict[str, Any] | None
    ) -> ShownGpu:
        """This GPU held by `held` now and `following` next: itself when nothing changed."""
        if held is self.data["reservation"] and following is self.data["next_reservation"]:
            return self
        return ShownGpu({**self.data, "reservation": held, "next_reservation": following})


class ShownHost:
    """A host's JSON without its GPUs (`{"name":...,"gpus":[`), its GPUs, and their JSON per
    view, made once: a booking changes one host's, the others' are reused."""

    __slots__ = ("_joined", "fields", "gpus", "head", "parties")

    def __init__(
        self, fields_only: dict[str, Any], gpus: tuple[ShownGpu, ...], head: bytes = b""
    ) -> None:
        self.fields = fields_only
        self.head = head or _dumps(fields_only)[:-1] + b',"gpus":['
        self.gpus = gpus
        self.parties: frozenset[str] = frozenset().union(*(gpu.parties for gpu in gpus))
        self._joined: dict[str, bytes] = {}

    def with_gpus(self, gpus: tuple[ShownGpu, ...]) -> ShownHost:
        if len(gpus) == len(self.gpus) and all(map(operator.is_, gpus, self.gpus)):
            return self
        return ShownHost(self.fields, gpus, self.head)

    def gpus_json(self, caller: Caller) -> bytes:
        """Its GPUs as `caller` sees them, comma-separated (empty when it has none)."""
        if caller.is_admin:
            key = "\x00admin"
        else:
            key = caller.username if caller.username in self.parties else ""
        found = self._joined.get(key)
        if found is None:
            found = self._joined[key] = b",".join(gpu.for_caller(caller) for gpu in self.gpus)
        return found

    def for_caller(self, caller: Caller) -> bytes:
        return self.head + self.gpus_json(caller) + b"]}"


def shown_hosts(
    hosts: list[dict[str, Any]], previous: dict[str, ShownHost]
) -> dict[str, ShownHost]:
    """The hosts serialised, reusing what did not change since `previous`."""
    shown: dict[str, ShownHost] = {}
    for host in hosts:
        before = previous.get(host["name"])
        old_gpus = {gpu.data["uuid"]: gpu for gpu in before.gpus} if before else {}
        gpus = []
        for gpu in host["gpus"]:
            old = old_gpus.get(gpu["uuid"])
            gpus.append(old if old is not None and old.data == gpu else ShownGpu(gpu))
        fields_only = {key: value for key, value in host.items() if key != "gpus"}
        if before is not None and before.fields == fields_only:
            shown[host["name"]] = before.with_gpus(tuple(gpus))
        else:
            shown[host["name"]] = ShownHost(fields_only, tuple(gpus))
    return shown


@dataclass
class Composition:
    """The fleet as composed at one time, and the answers made of it, per view: admins, each
    owner or guest of a reservation shown, everybody else."""

    changes: int  # calendar changes heard of before it was composed
    built_at: float  # monotonic, when the snapshot it shows was asked for
    generated_at: str
    hosts: dict[str, ShownHost]
    # Owners and guests who see more of a reservation shown than outsiders do.
    participants: frozenset[str] = field(init=False)
    # Which composition this is, in this process (its answers' ETags name it).
    serial: int = field(init=False, default_factory=lambda: next(_SERIALS))
    _answers: dict[tuple[str, str, str | None, str | None], bytes] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.participants = frozenset().union(*(host.parties for host in self.hosts.values()))

    def view_key(self, caller: Caller) -> str:
        """Callers with the same key see the same."""
        if caller.is_admin:
            return "\x00admin"
        return caller.username if caller.username in self.participants else ""

    def answer(
        self, caller: Caller, what: str, host: str | None = None, label: str | None = None
    ) -> bytes:
        """The JSON of `what` (hosts, host, gpus) for `caller`, made once per view; `label`:
        only the hosts that carry it, as an admin's label or a label of one of their GPUs
        (and their GPUs: for a GPU's label, only the GPUs that carry it)."""
        if host is not None and host not in self.hosts:
            raise NotFound(f"no host named {host!r}", {"host": host})
        key = (what, self.view_key(caller), host, label)
        found = self._answers.get(key)
        if found is not None:
            return found
        shown = list(self.hosts.values()) if host is None else [self.hosts[host]]
        if label is not None:
            shown = [one for one in shown if _carries(one.fields, label)]
        stamp = b'"generated_at":' + _dumps(self.generated_at)
        if what == "host":
            found = shown[0].for_caller(caller)
        elif what == "gpus":
            parts = (_gpus_carrying(one, caller, label) for one in shown if one.gpus)
            gpus = b",".join(part for part in parts if part)
            found = b"".join((b'{"gpus":[', gpus, b"],", stamp, b"}"))
        else:
            hosts = b",".join(one.for_caller(caller) for one in shown)
            found = b"".join((b'{"hosts":[', hosts, b"],", stamp, b"}"))
        if len(self._answers) < MAX_ANSWERS:
            self._answers[key] = found
        return found


def _gpus_carrying(host: ShownHost, caller: Caller, label: str | None) -> bytes:
    """The host's GPUs for `caller`: all of them, unless `label` is one of their hardware
    labels and not the host's own, then those GPUs only (a host may mix models)."""
    if label is None or label in host.fields.get("labels", ()):
        return host.gpus_json(caller)
    wanted = label.lower()
    return b",".join(
        gpu.for_caller(caller)
        for gpu in host.gpus
        if any(one.lower() == wanted for one in gpu.data.get("labels") or ())
    )


def _carries(host: dict[str, Any], label: str) -> bool:
    """The host has the admin's `label`, or one of its GPUs carries it (case aside)."""
    if label in host.get("labels", ()):
        return True
    wanted = label.lower()
    return any(one.lower() == wanted for one in host.get("gpu_labels", ()))


class Rpc(Protocol):
    """How the board asks a service (a route's `Call.rpc`)."""

    async def __call__(self, method: Method, args: Mapping[str, Any] | None = None) -> Any: ...


class FleetBoard:
    """The app's current Composition, kept up to date with few RPCs.

    - The monitor's snapshot is asked for again once the composition is REFRESH_AFTER_S old,
      by the first caller after that, who waits for that update (milliseconds) and gets its
      answer; the others that come meanwhile get the composition it replaces while that is
      younger than MAX_AGE_S, and wait for the update after that.
    - Reservations are read from the calendar copy, which tells the board which GPUs'
      reservations changed: a composition is served only while no change came after it, and
      the caller that finds it outdated puts only those GPUs together again, without an RPC or
      a task (and keeps the composition, and its ETags, if none of them shows). Until the copy
      covers the next 7 days (before its start-up load), each update asks the reservations
      service for them instead, so no GPU shows what a copy still loading lacks.
    - One update runs at a time; callers that need a newer one wait for it together.
    """

    def __init__(self, calendar: CalendarView, clock: Callable[[], float] = time.monotonic) -> None:
        self.calendar = calendar
        self.clock = clock
        self.latest: Composition | None = None
        self.changes = 0  # calendar changes heard of
        self._pending: set[str] = set()  # GPUs whose reservations changed since `latest`
        self._rehold_all = False  # `latest` shows the service's answer: read the copy for all
        self._updating: asyncio.Task[None] | None = None
        self.known = KnownGpus(clock)  # the GPUs of hosts the snapshot shows none of
        calendar.listeners.append(self.on_change)

    async def composition(self, rpc: Rpc) -> Composition:
        target = self.changes
        while True:
            latest = self.latest
            updating = self._updating is not None and not self._updating.done()
            if latest is not None and (
                self.clock() - latest.built_at < (MAX_AGE_S if updating else REFRESH_AFTER_S)
            ):
                # Young, or not too old while an update runs: the caller that started it waits
                # for it and gets its figures (a refresh served in the background went only
                # to the next caller: one polling once a second always got 1 s old figures);
                # the others meanwhile need not.
                if latest.changes >= target:
                    return latest
                now = datetime.now(UTC)
                if self.calendar.covers(now, now + NEXT_WITHIN):
                    # Only reservations changed, and the copy has them: put them in here, with
                    # no task (under load each of its turns costs a poller a queue's wait). An
                    # update under way reads the copy as it is when it ends: this is in it.
                    self._rehold(latest, now)
                    continue
            await asyncio.shield(self._update(rpc))

    def on_change(self, gpus: frozenset[str]) -> None:
        """A listener of the calendar copy: these GPUs' reservations changed."""
        self._pending |= gpus
        self.changes += 1

    def _update(self, rpc: Rpc) -> asyncio.Task[None]:
        """The update running now, or a new one (a finished one is never awaited again: its
        done callback may not have run yet)."""
        task = self._updating
        if task is None or task.done():
            task = self._updating = asyncio.create_task(self._run_update(rpc))
            task.add_done_callback(self._updated)
        return task

    def _updated(self, task: asyncio.Task[None]) -> None:
        if self._updating is task:
            self._updating = None
        if not task.cancelled() and task.exception() is not None:
            # Retrieved here: callers that waited got it; a background refresh only logs it.
            log.debug("composing hosts and GPUs failed: %s", task.exception())

    async def _run_update(self, rpc: Rpc) -> None:
        asked = self.changes  # heard of before the service is asked, if it is
        started = self.clock()
        latest = self.latest
        fetch_snapshot = latest is None or started - latest.built_at >= REFRESH_AFTER_S
        now = datetime.now(UTC)
        snapshot, calendar = await asyncio.gather(
            rpc(monitor_api.SNAPSHOT) if fetch_snapshot else _nothing(),
            self._calendar_at(rpc, now),
        )
        if fetch_snapshot:  # (before the copy is read: the awaits are over then)
            snapshot = await self.known.fill(rpc, snapshot)
        if calendar is self.calendar:
            # The copy as it is now, after the awaits: every change heard of so far is in it.
            changes, pending, everything = self.changes, self._pending, self._rehold_all
            self._pending, self._rehold_all = set(), False
        else:
            # The service's answer holds what was heard before it was asked; every GPU is
            # read from the copy again once that covers the next 7 days.
            changes, pending, everything = asked, set(), True
            self._rehold_all = True
        holders = _holders(calendar, now)
        latest = self.latest  # (reservations put in meanwhile by callers)
        if fetch_snapshot:
            hosts = compose_hosts(snapshot, holders)
            shown = shown_hosts(hosts, latest.hosts if latest else {})
            generated_at = snapshot.get("generated_at") or now.isoformat()
            self.latest = Composition(changes, started, generated_at, shown)
        else:
            assert latest is not None
            self._show(latest, changes, holders, None if everything else pending)

    def _rehold(self, latest: Composition, now: datetime) -> None:
        """`latest` with the reservations changed since, from the calendar copy."""
        changes, pending, everything = self.changes, self._pending, self._rehold_all
        self._pending, self._rehold_all = set(), False
        self._show(latest, changes, _holders(self.calendar, now), None if everything else pending)

    def _show(
        self, latest: Composition, changes: int, holders: Holders, only: Set[str] | None
    ) -> None:
        """`latest` with the reservations of the GPUs `only` (None: all) as `holders` has them,
        counting the calendar's first `changes` changes."""
        shown = _rehold_hosts(latest.hosts, holders, only)
        if all(map(operator.is_, shown.values(), latest.hosts.values())):
            # Nothing shown changed (a booking beyond the next 7 days): the same answers, so
            # the same ETags, and pollers keep getting 304s.
            latest.changes = max(latest.changes, changes)
        else:
            self.latest = Composition(changes, latest.built_at, latest.generated_at, shown)

    async def _calendar_at(self, rpc: Rpc, now: datetime) -> CalendarView:
        """The calendar copy when it covers the next 7 days, else the service's answer for them."""
        end = now + NEXT_WITHIN
        if self.calendar.covers(now, end):
            return self.calendar
        answered = CalendarView()
        window = {"start": now.isoformat(), "end": end.isoformat()}
        answered.load(await rpc(reservations_api.CALENDAR, window), now, end)
        return answered


async def _nothing() -> dict[str, Any]:
    return {}


def _holders(calendar: CalendarView, now: datetime) -> Holders:
    def holders(uuid: str) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        return calendar.now_and_next(uuid, now, NEXT_WITHIN)

    return holders


def _rehold_hosts(
    hosts: dict[str, ShownHost], holders: Holders, only: Set[str] | None
) -> dict[str, ShownHost]:
    """The hosts with the reservations of the GPUs `only` (None: all) as `holders` has them."""
    changed = dict(hosts)
    for name, host in hosts.items():
        if only is not None and not any(gpu.data["uuid"] in only for gpu in host.gpus):
            continue
        gpus = tuple(
            gpu.with_holders(*holders(gpu.data["uuid"]))
            if only is None or gpu.data["uuid"] in only
            else gpu
            for gpu in host.gpus
        )
        changed[name] = host.with_gpus(gpus)
    return changed
