"""The seed of bench/api_load.py: reservations planned so that none overlaps another (`Planner`),
made by POST as admin (`seed_through_api`, --seed-via api) or inserted straight into the
tables while the server is stopped (`seed_into_database`, the default).
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _api_load_api import (
    Api,
    iso,
)
from _api_load_figures import (
    ADMIN,
    CHUNK,
    HALF_HOUR,
    HOUR,
    SEED_AHEAD,
    SEED_ATTEMPTS,
    SEED_CLIENTS,
    SEED_SIZES,
    SEED_TITLES,
    USERS,
)
from sqlalchemy import func, insert, select

from services.reservations.store import to_ms
from services.reservations.tables import gpu_slots, reservations
from services.shared.config import load_settings
from services.shared.storage import db

# --- seeding ------------------------------------------------------------------------------------


class Timeline:
    """Busy intervals of one GPU (epoch seconds), unsorted: a few dozen per GPU at most."""

    def __init__(self) -> None:
        self.busy: list[tuple[float, float]] = []

    def free(self, start: float, end: float) -> bool:
        return all(end <= s or e <= start for s, e in self.busy)

    def take(self, start: float, end: float) -> None:
        self.busy.append((start, end))


@dataclass
class SeedStats:
    created: int = 0
    conflicts: int = 0
    given_up: int = 0
    errors: int = 0


@dataclass(frozen=True)
class Planned:
    owner: str
    gpus: list[str]
    start: datetime
    end: datetime
    title: str


class Planner:
    """Reservations that never overlap on a GPU, placed at random (big ones first), from the
    next full hour to SEED_AHEAD from now, on 1, 2, 4 or 8 GPUs of one host, 1-12 h."""

    def __init__(self, by_host: dict[str, list[str]], seed_value: int) -> None:
        self.rng = random.Random(seed_value)
        self.by_host = by_host
        self.hosts = sorted(by_host)
        self.timelines = {uuid: Timeline() for uuids in by_host.values() for uuid in uuids}
        now = datetime.now(UTC)
        self.origin = now.replace(minute=0, second=0, microsecond=0) + HOUR
        self.half_hours = int((now + SEED_AHEAD - self.origin) / HALF_HOUR)

    def sizes(self, count: int) -> list[int]:
        weights = [w for _, w in SEED_SIZES]
        return sorted(self.rng.choices([s for s, _ in SEED_SIZES], weights, k=count), reverse=True)

    def plan(self, size: int) -> Planned:
        rng = self.rng
        while True:
            for _ in range(200):
                duration = rng.randint(2, 24) * HALF_HOUR  # 1-12 h
                slot = rng.randrange(self.half_hours - duration // HALF_HOUR)
                start = self.origin + slot * HALF_HOUR
                end = start + duration
                chosen = rng.sample(self.by_host[rng.choice(self.hosts)], size)
                s, e = start.timestamp(), end.timestamp()
                if all(self.timelines[uuid].free(s, e) for uuid in chosen):
                    for uuid in chosen:
                        self.timelines[uuid].take(s, e)
                    owner, title = rng.choice(USERS), rng.choice(SEED_TITLES)
                    return Planned(owner, sorted(chosen), start, end, title)
            size = max(1, size // 2)  # a crowded plan: smaller


async def seed_through_api(
    api: Api, admin: str, by_host: dict[str, list[str]], count: int, seed_value: int
) -> SeedStats:
    """The plan created by admin for its owners, SEED_CLIENTS requests at a time."""
    planner = Planner(by_host, seed_value)
    stats = SeedStats()
    pending = iter(planner.sizes(count))
    url = api.url("/reservations")
    headers = {"Authorization": f"Bearer {admin}"}

    async def worker() -> None:
        for size in pending:
            for _ in range(SEED_ATTEMPTS):
                p = planner.plan(size)
                body = {
                    "gpus": p.gpus,
                    "start": iso(p.start),
                    "end": iso(p.end),
                    "title": p.title,
                    "owner": p.owner,
                }
                async with api.session.post(url, json=body, headers=headers) as response:
                    text = await response.read()
                    status = response.status
                if status == 201:
                    stats.created += 1
                    break
                if status == 409:  # a reservation made outside the plan: elsewhere
                    stats.conflicts += 1
                    continue
                stats.errors += 1
                if stats.errors <= 5:
                    print(f"  seeding: HTTP {status} {text[:300]!r}", flush=True)
                break
            else:
                stats.given_up += 1

    await asyncio.gather(*(worker() for _ in range(SEED_CLIENTS)))
    return stats


async def seed_into_database(
    config: Path, tmp: Path, by_host: dict[str, list[str]], count: int, seed_value: int
) -> SeedStats:
    """The same plan inserted straight into the tables `reservations` and
    `reservations_gpu_slots` while the server is stopped (as bench/reservations_load.py)."""
    planner = Planner(by_host, seed_value)
    plan = [planner.plan(size) for size in planner.sizes(count)]
    settings = load_settings(config, environ={"HOME": str(tmp)})
    engine = db.create_engine(settings.storage.database_url_for("reservations"))
    try:
        async with engine.begin() as conn:
            found = (await conn.execute(select(func.max(reservations.c.id)))).scalar()
            created = to_ms(datetime.now(UTC)) - 3_600_000
            rows: list[dict[str, Any]] = []
            slots: list[dict[str, Any]] = []
            for rid, p in enumerate(plan, start=int(found or 0) + 1):
                start_ms, end_ms = to_ms(p.start), to_ms(p.end)
                rows.append(
                    {
                        "id": rid,
                        "owner": p.owner,
                        "title": p.title,
                        "description": "",
                        "start_ms": start_ms,
                        "end_ms": end_ms,
                        "status": "active",
                        "created_by": ADMIN,
                        "created_at_ms": created,
                        "updated_at_ms": created,
                        "cancelled_by_rules": False,
                        "started_event_ms": None,
                        "ended_event_ms": None,
                    }
                )
                slots.extend(
                    {
                        "reservation_id": rid,
                        "gpu_uuid": uuid,
                        "owner": p.owner,
                        "start_ms": start_ms,
                        "end_ms": end_ms,
                        "active": True,
                    }
                    for uuid in p.gpus
                )
            for table, items in ((reservations, rows), (gpu_slots, slots)):
                for i in range(0, len(items), CHUNK):
                    await conn.execute(insert(table), items[i : i + CHUNK])
    finally:
        await engine.dispose()
    return SeedStats(created=len(plan))
