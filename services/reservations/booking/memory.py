"""What every create reads, held in memory and checked against the database's version counters
(table `reservations_versions`, moved by triggers in the transaction of each change, whoever
makes it: this replica, another one, an admin's SQL).

- `Directory`: users (admin or not, their groups), access rules and GPUs. Loaded again whole
  when the `directory` counter moved.
- `SlotIndex`: per GPU, the active slots ending after a cut-off, sorted by start; a GPU is
  loaded on first use. Dropped whole when `slots_freed` moved (a cancel, a shortened or moved
  booking, here or in another replica), so a conflict seen in memory is a real one, never a
  slot someone freed meanwhile. A booking another replica made is not in it: the database's
  constraint refuses ours (409), and that GPU is loaded again. Rebuilt every REBUILD_S anyway,
  so bookings that ended do not pile up.

`Memory.sync(conn)` reads both counters (one query) inside the caller's write transaction.
Reads (overview, earliest slot, the idle watch) take the directory from `ReadDirectory`, checked
against the `directory` counter on the read's own connection: what it answers is at least as
new as the counter read (the counter is read first, the tables after), so a change committed
by any replica before the read began is in it.
"""

from __future__ import annotations

import bisect
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.accounts.api import Actor
from services.reservations.booking import heavy_reads as reads
from services.reservations.booking import repository
from services.reservations.rules.domain import AccessRule, Gpu, Member
from services.reservations.rules.mig import instances_by_parent
from services.reservations.rules.refusals import Clash
from services.reservations.store import from_ms
from services.reservations.tables import group_members, groups, users

# The slot index is rebuilt (lazily, per GPU) at least this often: bookings that ended leave it.
REBUILD_S = 600.0


@dataclass(frozen=True)
class Directory:
    """Users, access rules and GPUs as one version of the database held them."""

    admins: dict[str, bool] = field(default_factory=dict)  # username -> is admin
    groups: dict[str, frozenset[str]] = field(default_factory=dict)  # username -> group names
    rules: tuple[AccessRule, ...] = ()
    gpus: dict[str, Gpu] = field(default_factory=dict)
    instances: dict[str, tuple[Gpu, ...]] = field(default_factory=dict)  # MIG, by parent uuid

    def actor(self, username: str) -> Actor | None:
        admin = self.admins.get(username)
        return None if admin is None else Actor(username, admin)

    def member(self, username: str) -> Member | None:
        if username not in self.admins:
            return None
        return Member(username, self.groups.get(username, frozenset()))

    def unknown_users(self, usernames: Iterable[str]) -> list[str]:
        return sorted(set(usernames) - self.admins.keys())


async def load_directory(conn: AsyncConnection) -> Directory:
    by_id: dict[int, str] = {}
    admins: dict[str, bool] = {}
    for user_id, username, is_admin in await conn.execute(
        select(users.c.id, users.c.username, users.c.is_admin)
    ):
        by_id[user_id] = username
        admins[username] = bool(is_admin)
    member_of: dict[str, set[str]] = {}
    query = select(group_members.c.user_id, groups.c.name).join(
        groups, groups.c.id == group_members.c.group_id
    )
    for user_id, name in await conn.execute(query):
        if user_id in by_id:
            member_of.setdefault(by_id[user_id], set()).add(name)
    known = await repository.load_gpus(conn)
    return Directory(
        admins=admins,
        groups={name: frozenset(found) for name, found in member_of.items()},
        rules=tuple(await repository.load_rules(conn)),
        gpus=known,
        instances=instances_by_parent(known.values()),
    )


@dataclass
class _Timeline:
    """One GPU's active slots, sorted by start (disjoint in the database; not assumed here)."""

    starts: list[int] = field(default_factory=list)
    slots: list[tuple[int, int, int, str]] = field(default_factory=list)  # start, end, id, owner
    longest: int = 0

    def add(self, start: int, end: int, reservation_id: int, owner: str) -> None:
        i = bisect.bisect_right(self.starts, start)
        self.starts.insert(i, start)
        self.slots.insert(i, (start, end, reservation_id, owner))
        self.longest = max(self.longest, end - start)

    def rename(self, start: int, old_id: int, new_id: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        while i < len(self.slots) and self.slots[i][0] == start:
            if self.slots[i][2] == old_id:
                self.slots[i] = (start, self.slots[i][1], new_id, self.slots[i][3])
                return
            i += 1

    def overlapping(self, start: int, end: int) -> list[tuple[int, int, int, str]]:
        low = bisect.bisect_left(self.starts, start - self.longest)
        high = bisect.bisect_left(self.starts, end)
        return [slot for slot in self.slots[low:high] if slot[1] > start]


class SlotIndex:
    """Active GPU slots by GPU, for the conflict check of a create."""

    def __init__(self) -> None:
        self._gpus: dict[str, _Timeline] = {}

    def clear(self) -> None:
        self._gpus.clear()

    def forget(self, uuids: Iterable[str]) -> None:
        for uuid in uuids:
            self._gpus.pop(uuid, None)

    async def load(
        self, conn: AsyncConnection, uuids: Sequence[str], after_ms: int, also: Iterable[str] = ()
    ) -> None:
        """(Re)load the GPUs of `uuids` not held yet: their active slots ending after
        `after_ms` (a create cannot start earlier). When it queries, the GPUs of `also` that
        are not held come in the same query."""
        if all(uuid in self._gpus for uuid in uuids):
            return
        missing = [uuid for uuid in dict.fromkeys([*uuids, *also]) if uuid not in self._gpus]
        found: dict[str, list[tuple[int, int, int, str]]] = {uuid: [] for uuid in missing}
        for uuid, reservation_id, owner, start, end in await reads.busy_slots(
            conn, after_ms, 2**62, missing
        ):
            found[uuid].append((start, end, reservation_id, owner))
        for uuid, held in found.items():
            held.sort()
            self._gpus[uuid] = _Timeline(
                [slot[0] for slot in held], held, max((b - a for a, b, _i, _o in held), default=0)
            )

    def add(
        self, uuids: Iterable[str], start: int, end: int, reservation_id: int, owner: str
    ) -> None:
        """A booking this replica wrote (in a transaction that has not failed so far)."""
        for uuid in uuids:
            timeline = self._gpus.get(uuid)
            if timeline is not None:
                timeline.add(start, end, reservation_id, owner)

    def rename(self, uuids: Iterable[str], start: int, old_id: int, new_id: int) -> None:
        """A pending booking (placeholder id) got its id from the database."""
        for uuid in uuids:
            timeline = self._gpus.get(uuid)
            if timeline is not None:
                timeline.rename(start, old_id, new_id)

    def clashes(self, uuids: Sequence[str], start: int, end: int) -> list[Clash]:
        """What `repository.clashes` would answer, for GPUs loaded with `load`."""
        return [
            Clash(uuid, rid, owner, from_ms(held_start), from_ms(held_end))
            for uuid in uuids
            for held_start, held_end, rid, owner in self._gpus[uuid].overlapping(start, end)
        ]


class ReadDirectory:
    """The directory for reads, shared by every read of one replica."""

    def __init__(self) -> None:
        self._held: tuple[int, Directory] | None = None

    def offer(self, version: int, directory: Directory) -> None:
        """Keep `directory` (as of `version`) unless a newer one is held: counters only grow,
        and two loads may finish in either order."""
        if self._held is None or self._held[0] < version:
            self._held = (version, directory)

    async def get(self, conn: AsyncConnection) -> Directory:
        """The directory as of now: one small query when nothing changed."""
        return await self.at(conn, await reads.directory_version(conn))

    def held_at(self, version: int) -> Directory | None:
        """The directory held, if it is of `version`."""
        held = self._held
        return held[1] if held is not None and held[0] == version else None

    async def at(self, conn: AsyncConnection, version: int) -> Directory:
        """The directory as of `version`, the counter just read on `conn` (or newer)."""
        held = self._held
        if held is not None and held[0] == version:
            return held[1]
        directory = await load_directory(conn)
        self.offer(version, directory)
        return directory


class Memory:
    """The directory and the slot index of one replica, with the versions they are of."""

    def __init__(self) -> None:
        self.directory = Directory()
        self.reads = ReadDirectory()  # what a write transaction loads serves the reads too
        self.slots = SlotIndex()
        self._versions: tuple[int, int] | None = None
        self._built_at = time.monotonic()

    def reset(self) -> None:
        """Forget everything (a write transaction failed): the next sync reloads."""
        self._versions = None
        self.slots.clear()

    async def sync(self, conn: AsyncConnection) -> None:
        """Bring the model up to the database's versions; call inside the write transaction."""
        directory, freed = await reads.versions(conn)
        held = self._versions
        if held is None or held[0] != directory:
            self.directory = await load_directory(conn)
            self.reads.offer(directory, self.directory)
        if held is None or held[1] != freed or time.monotonic() - self._built_at > REBUILD_S:
            self.slots.clear()
            self._built_at = time.monotonic()
        self._versions = (directory, freed)
