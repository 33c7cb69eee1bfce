"""Which GPU processes of one host violate, at the time the monitor saw them (pure).

`reservations` mode: a process of anyone but the owner or a guest on a reserved GPU.
`strict` mode: also any process on a GPU that nobody reserved. Allowed (user, command) pairs
never violate; a process whose owner the host could not tell is left alone (there is nobody
to warn and nothing to kill safely). One `Offence` per (offender, GPU, reservation).
"""

from __future__ import annotations

import fnmatch
import posixpath
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from services.shared.reservation_book import Holding


@dataclass(frozen=True)
class SeenProcess:
    pid: int
    user: str | None
    command: str
    gpu_uuid: str
    started_at: datetime | None = None
    used_memory_mib: float | None = None


@dataclass(frozen=True)
class Offence:
    offender: str
    host: str
    gpu_uuid: str
    holding: Holding | None  # None: strict mode, a GPU nobody reserved
    processes: tuple[SeenProcess, ...]

    @property
    def key(self) -> tuple[str, str, str, int | None]:
        return (
            self.offender,
            self.host,
            self.gpu_uuid,
            None if self.holding is None else self.holding.reservation_id,
        )


def executable(command: str) -> str:
    """`/usr/lib/xorg/Xorg -core :0` -> `Xorg`."""
    first = command.strip().split(" ", 1)[0] if command.strip() else ""
    return posixpath.basename(first)


def is_allowed(user: str, command: str, allow: Iterable[tuple[str, str]]) -> bool:
    name = executable(command)
    return any(
        fnmatch.fnmatchcase(user, allowed_user) and fnmatch.fnmatchcase(name, allowed_command)
        for allowed_user, allowed_command in allow
    )


def with_mig_parents(
    holding_at: Callable[[str], Holding | None], parents: Mapping[str, str]
) -> Callable[[str], Holding | None]:
    """`holding_at` where a MIG instance nobody reserved is held by its GPU's reservation (a
    booking of the whole GPU made before it was split covers its instances)."""

    def held(gpu_uuid: str) -> Holding | None:
        found = holding_at(gpu_uuid)
        parent = parents.get(gpu_uuid)
        return found if found is not None or parent is None else holding_at(parent)

    return held


def detect(
    host: str,
    processes: Sequence[SeenProcess],
    holding_at: Callable[[str], Holding | None],
    *,
    mode: str,
    allow: Iterable[tuple[str, str]],
) -> list[Offence]:
    """The offences among `processes`; `holding_at(gpu_uuid)` is the reservation then."""
    allow = tuple(allow)
    grouped: dict[tuple[str, str], list[SeenProcess]] = {}
    holdings: dict[str, Holding | None] = {}
    for process in processes:
        if process.user is None or is_allowed(process.user, process.command, allow):
            continue
        if process.gpu_uuid not in holdings:
            holdings[process.gpu_uuid] = holding_at(process.gpu_uuid)
        held = holdings[process.gpu_uuid]
        if held is None:
            if mode != "strict":
                continue
        elif held.may_use(process.user):
            continue
        grouped.setdefault((process.user, process.gpu_uuid), []).append(process)
    return [
        Offence(
            offender=user,
            host=host,
            gpu_uuid=uuid,
            holding=holdings[uuid],
            processes=tuple(sorted(found, key=lambda p: p.pid)),
        )
        for (user, uuid), found in sorted(grouped.items())
    ]
