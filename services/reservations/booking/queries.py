"""Read-only answers: one reservation, the calendar, the long-term overview, the earliest free
slot, and who holds a GPU at a given time.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations import api
from services.reservations.booking import heavy_reads as reads
from services.reservations.booking import repository
from services.reservations.booking.activity import ActivityBoard
from services.reservations.booking.memory import Directory, ReadDirectory
from services.reservations.booking.repository import ReservationRecord
from services.reservations.maintenance import rows as maintenance
from services.reservations.rules import grid
from services.reservations.rules.access import (
    allowed_by_gpu,
    period_text,
    rule_applies_to,
    use_refusals,
)
from services.reservations.rules.domain import AccessRule, Gpu, Interval, Member
from services.reservations.rules.intervals import merge
from services.reservations.rules.maintenance import busy_by_gpu, maintenance_refusals
from services.reservations.rules.planner import IdleFirst, Locality, Slot, earliest_slot
from services.reservations.store import Store, from_ms, now_ms, to_ms
from services.shared.errors import InvalidRequest, NotFound
from services.shared.gpu_labels import failed_terms, gpu_labels, matches, selector_text
from services.shared.topology import PACK, Topology

MAX_OVERVIEW = MAX_CALENDAR = api.MAX_RANGE
SLOT_SEARCH_HORIZON = timedelta(weeks=8)
SLOT_SEARCH_STEPS = (timedelta(days=2), timedelta(weeks=2), SLOT_SEARCH_HORIZON)


class Queries:
    def __init__(
        self,
        store: Store,
        live_usage: Callable[[int], dict[str, Any] | None] = lambda _: None,
        host_offered: Callable[[str], bool] = lambda _host: True,
        activity: ActivityBoard | None = None,
        directory: ReadDirectory | None = None,
    ) -> None:
        self.store = store
        # Users, groups, rules and GPUs, checked against the database's version counter per read.
        self.directory = directory or ReadDirectory()
        self.live_usage = live_usage  # usage of running reservations, fresher than stored
        # Each host's GPU interconnect (the monitor's host.topology_read) and the packing:
        # which of the fitting GPUs the earliest slot takes.
        self.topologies: Mapping[str, Topology] = {}
        self.packing = PACK
        self.host_offered = host_offered  # a removed host's GPUs are not offered
        self.activity = activity  # what runs on the GPUs now: idle ones first for a slot now

    def _present(self, found: ReservationRecord, known: dict[str, Gpu]) -> dict[str, Any]:
        shown = found.to_dict(known)
        shown["usage"] = self.live_usage(found.id) or shown["usage"]
        return shown

    async def get(self, reservation_id: int) -> dict[str, Any]:
        async with self.store.read() as conn:
            found = await repository.record(conn, reservation_id)
            if found is None:
                raise NotFound(f"no reservation {reservation_id}", {"id": reservation_id})
            known = await repository.load_gpus(conn, found.gpu_uuids)
        return self._present(found, known)

    async def gpus(self) -> list[dict[str, Any]]:
        async with self.store.read() as conn:
            known = await repository.load_gpus(conn)
        return [repository.gpu_dict(gpu) for gpu in known.values()]

    async def rules(self, applying_to: str | None = None) -> list[dict[str, Any]]:
        """Every access rule, or those whose subjects include the user `applying_to`."""
        async with self.store.read() as conn:
            rows = await repository.rule_rows(conn)
            if applying_to is None:
                return [repository.rule_dict(row) for row in rows]
            member = await repository.member(conn, applying_to)
        return [
            repository.rule_dict(row)
            for row in rows
            if rule_applies_to(repository.rule_from_row(row), member)
        ]

    async def calendar(
        self,
        start: datetime,
        end: datetime,
        gpu_uuids: Sequence[str] | None = None,
        *,
        owner: str | None = None,
        include_cancelled: bool = False,
    ) -> list[dict[str, Any]]:
        """Reservations overlapping [start, end) on the GPUs (all when None), by start."""
        _check_range(start, end, MAX_CALENDAR)
        async with self.store.read() as conn:
            found = await reads.calendar(
                conn,
                to_ms(start),
                to_ms(end),
                gpu_uuids,
                owner=owner,
                active_only=not include_cancelled,
                now=now_ms(),
            )
        for shown in found:
            shown["usage"] = self.live_usage(shown["id"]) or shown["usage"]
        return found

    async def overview(
        self,
        username: str,
        start: datetime,
        end: datetime,
        slot: timedelta,
        gpu_uuids: Sequence[str] | None = None,
        *,
        compact: bool = False,
    ) -> dict[str, Any]:
        """Per GPU (grouped by host), runs of equal slots: free, mine, taken, not_allowed.

        `compact`: each GPU's runs as one flat list `cells` = [label, count, label, count,
        ...] indexing the answer's `labels` ([state, owner, reservation_id] each), instead
        of an object per run: the same content, a fraction of the bytes and the work."""
        _check_range(start, end, MAX_OVERVIEW)
        slots = int((end - start) / slot)
        if slots < 1:
            raise InvalidRequest("the range is shorter than one slot", {"field": "end"})
        end = start + slots * slot
        found = reads.busy_slots_and_directory_version_now(
            self.store, to_ms(start), to_ms(end), gpu_uuids
        )
        directory = None if found is None else self.directory.held_at(found[0])
        if found is None or directory is None:  # not SQLite, or the directory moved
            async with self.store.read() as conn:
                version, rows = await reads.busy_slots_and_directory_version(
                    conn, to_ms(start), to_ms(end), gpu_uuids
                )
                directory = await self.directory.at(conn, version)
        else:
            rows = found[1]
        member = _member(directory, username)
        known = _gpus(directory, gpu_uuids)
        mine = [r for r in directory.rules if rule_applies_to(r, member)]
        allowed = allowed_by_gpu(member, mine, list(known.values()), start, end)
        booked = grid.by_gpu(rows)
        cells = grid.Grid(username, start, slot, slots)
        hosts: dict[str, list[dict[str, Any]]] = {}
        for gpu in known.values():
            row = cells.row(allowed[gpu.uuid], booked.get(gpu.uuid, ()))
            shown = repository.gpu_dict(gpu)
            if compact:
                shown["cells"] = row
            else:
                shown["runs"] = grid.runs_of(row, cells.labels)
            hosts.setdefault(gpu.host, []).append(shown)
        answer: dict[str, Any] = {
            "start": start.isoformat(),
            "end": end.isoformat(),
            "slot_minutes": slot.total_seconds() / 60,
            "slots": slots,
            "hosts": [{"host": host, "gpus": gpus} for host, gpus in hosts.items()],
        }
        if compact:
            answer["labels"] = [list(label) for label in cells.labels]
        return answer

    async def find_slot(
        self,
        username: str,
        *,
        count: int,
        duration: timedelta,
        not_before: datetime,
        host: str | None = None,
        gpu_model: str | None = None,
        same_host: bool = False,
        now: datetime | None = None,
        labels: Sequence[str] = (),
    ) -> dict[str, Any]:
        """The earliest start where `username` may use `count` GPUs nobody reserved; for a
        slot that starts now, GPUs idle now before those in use. `labels`: only GPUs that
        meet every term (`services.shared.gpu_labels`)."""
        horizon = not_before + SLOT_SEARCH_HORIZON
        async with self.store.read() as conn:
            directory = await self.directory.get(conn)
            member = _member(directory, username)
            rules = directory.rules
            known = directory.gpus
            candidates = [
                g
                for g in known.values()
                if _matches(g, host, gpu_model)
                and self.host_offered(g.host)
                and g.uuid not in directory.instances  # split by MIG: its instances are offered
            ]
            candidates = _labelled(candidates, labels)
            # Rules whose own limits already forbid this request cannot make room for it.
            usable = [
                r
                for r in rules
                if rule_applies_to(r, member)
                and (r.limits.max_duration is None or duration <= r.limits.max_duration)
                and (r.limits.max_gpus is None or count <= r.limits.max_gpus)
            ]
            prefer = self._idle_first(candidates, now)
            found = None
            # Most requests fit soon: look close first, and only then read further ahead. A
            # slot found within a shorter horizon is the earliest of the longer ones too.
            for ahead in SLOT_SEARCH_STEPS:
                if found is not None or not candidates:
                    break
                until = min(not_before + max(ahead, 2 * duration), horizon)
                found = await self._earliest(
                    conn,
                    member,
                    usable,
                    candidates,
                    count,
                    duration,
                    not_before,
                    until,
                    same_host,
                    prefer,
                    Locality(self.topologies, self.packing),
                )
        if found is None:
            where = f" on {host}" if host else ""
            raise NotFound(
                f"no {count} GPU{'s' if count > 1 else ''}{where}{_labelled_text(labels)} "
                f"free for you for {duration} within {SLOT_SEARCH_HORIZON.days // 7} weeks",
                {"count": count, "horizon": horizon.isoformat(), "labels": list(labels)},
            )
        return {
            "start": found.start.isoformat(),
            "end": found.end.isoformat(),
            "gpus": [repository.gpu_dict(known[uuid]) for uuid in found.gpus],
            "why": found.why,
        }

    def _idle_first(self, candidates: Sequence[Gpu], now: datetime | None) -> IdleFirst | None:
        if self.activity is None or now is None:
            return None
        ranks = self.activity.ranks(((g.host, g.uuid) for g in candidates), now)
        return IdleFirst(ranks, now + self.activity.now_window)

    @staticmethod
    async def _earliest(
        conn: AsyncConnection,
        member: Member,
        rules: Sequence[AccessRule],
        candidates: Sequence[Gpu],
        count: int,
        duration: timedelta,
        not_before: datetime,
        horizon: datetime,
        same_host: bool,
        prefer: IdleFirst | None,
        locality: Locality,
    ) -> Slot | None:
        rows = await reads.busy_slots(
            conn, to_ms(not_before), to_ms(horizon), [g.uuid for g in candidates]
        )
        allowed = allowed_by_gpu(member, rules, candidates, not_before, horizon)
        # Drained GPUs are busy for their maintenance windows.
        windows = await maintenance.windows(conn, to_ms(not_before), to_ms(horizon))
        busy = busy_by_gpu(windows, candidates, not_before, horizon)
        for uuid, _id, _owner, start_ms, end_ms in rows:
            busy.setdefault(uuid, []).append(Interval(from_ms(start_ms), from_ms(end_ms)))
        return earliest_slot(
            candidates,
            allowed,
            {uuid: merge(intervals) for uuid, intervals in busy.items()},
            count,
            duration,
            not_before,
            horizon,
            same_host=same_host,
            prefer=prefer,
            locality=locality,
        )

    async def use_refusals(
        self, username: str, gpu_uuids: Sequence[str], start: datetime, end: datetime
    ) -> list[dict[str, Any]]:
        """Why `username` may not use these GPUs over [start, end) without a reservation: no
        access rule covers the time, or someone else (who did not make them a guest) reserved
        them. An empty list: allowed."""
        async with self.store.read() as conn:
            directory = await self.directory.get(conn)
            member = _member(directory, username)
            known = _gpus(directory, gpu_uuids)
            missing = sorted(set(gpu_uuids) - set(known))
            if missing:
                raise InvalidRequest(
                    f"unknown GPU {', '.join(missing)}", {"field": "gpus", "unknown": missing}
                )
            rules = directory.rules
            rows = await repository.slots_in_range(conn, to_ms(start), to_ms(end), gpu_uuids)
            found = await repository.records(conn, {row.reservation_id for row in rows})
            windows = await maintenance.windows(conn, to_ms(start), to_ms(end))
        refusals = [
            r.to_dict() for r in use_refusals(member, rules, list(known.values()), start, end)
        ]
        # A drained GPU is nobody's to start work on in its window.
        refusals += [r.to_dict() for r in maintenance_refusals(windows, known.values(), start, end)]
        for row in sorted(rows, key=lambda r: (r.start_ms, r.gpu_uuid)):
            record = found[row.reservation_id]
            if row.owner == username or username in record.guests:
                continue
            gpu = known[row.gpu_uuid]
            refusals.append(
                {
                    "code": "conflict",
                    "message": (
                        f"GPU {gpu.host}:{gpu.index} is reserved by {row.owner} "
                        f"{period_text(Interval(from_ms(row.start_ms), from_ms(row.end_ms)))}"
                    ),
                    "gpu": gpu.uuid,
                    "host": gpu.host,
                    "index": gpu.index,
                    "reservation_id": row.reservation_id,
                    "owner": row.owner,
                }
            )
        return refusals

    async def active_at(
        self, at: datetime, gpu_uuids: Sequence[str] | None = None, host: str | None = None
    ) -> list[dict[str, Any]]:
        """Per GPU, the active reservation holding it at `at` (GPUs without one are left out),
        with the reservation's guests: who besides the owner may use the GPU.
        """
        at_ms = to_ms(at)
        async with self.store.read() as conn:
            if host is not None:
                on_host = await repository.load_gpus(conn)
                gpu_uuids = [
                    g.uuid
                    for g in on_host.values()
                    if g.host == host and (gpu_uuids is None or g.uuid in gpu_uuids)
                ]
            rows = await repository.slots_in_range(conn, at_ms, at_ms + 1, gpu_uuids)
            found = await repository.records(conn, {row.reservation_id for row in rows})
        return [
            {
                "gpu_uuid": row.gpu_uuid,
                "reservation_id": row.reservation_id,
                "owner": row.owner,
                "title": found[row.reservation_id].title,
                "guests": list(found[row.reservation_id].guests),
                "start": from_ms(row.start_ms).isoformat(),
                "end": from_ms(row.end_ms).isoformat(),
            }
            for row in sorted(rows, key=lambda r: r.gpu_uuid)
        ]


def _member(directory: Directory, username: str) -> Member:
    member = directory.member(username)
    if member is None:
        raise NotFound(f"no user named {username!r}", {"user": username})
    return member


def _gpus(directory: Directory, uuids: Sequence[str] | None) -> dict[str, Gpu]:
    """The known GPUs of `uuids` (all when None), in host and index order."""
    if uuids is None:
        return dict(directory.gpus)
    wanted = set(uuids)
    return {uuid: gpu for uuid, gpu in directory.gpus.items() if uuid in wanted}


def _matches(gpu: Gpu, host: str | None, gpu_model: str | None) -> bool:
    if not gpu.present or gpu.health == "failed" or (host is not None and gpu.host != host):
        return False
    return gpu_model is None or gpu_model.lower() in gpu.name.lower()


def _labelled(candidates: list[Gpu], labels: Sequence[str]) -> list[Gpu]:
    """The candidates that meet every label term; none at all is said at once, by label."""
    if not labels:
        return candidates
    kept = [g for g in candidates if matches(gpu_labels(g.name, g.memory_total_mib), labels)]
    if candidates and not kept:
        # The terms no GPU meets, if any, are the ones to name; else no GPU meets them all.
        failed = _failed_everywhere(candidates, labels)
        raise NotFound(
            f"no GPU{_labelled_text(failed or labels)} is offered",
            {"labels": list(labels), "failed": failed or list(labels)},
        )
    return kept


def _failed_everywhere(gpus: Sequence[Gpu], labels: Sequence[str]) -> list[str]:
    """The terms no GPU meets (the ones to blame for an empty match), in the order given."""
    met = {
        term
        for g in gpus
        for term in labels
        if term not in failed_terms(gpu_labels(g.name, g.memory_total_mib), [term])
    }
    return [term for term in labels if term not in met]


def _labelled_text(labels: Sequence[str]) -> str:
    return f" labelled {selector_text(labels)}" if labels else ""


def _check_range(start: datetime, end: datetime, longest: timedelta) -> None:
    if end <= start:
        raise InvalidRequest("the end must be after the start", {"field": "end"})
    if end - start > longest:
        raise InvalidRequest(
            f"a range may span at most {longest.days // 7} weeks", {"field": "end"}
        )
