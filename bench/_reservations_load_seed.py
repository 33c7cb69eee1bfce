"""The data of bench/reservations_load.py: a fresh PostgreSQL database for a run
(`postgres_database`), and the seed bulk-inserted into the reservations tables (`seed`): 50 users
and an admin, 200 GPUs (25 hosts x 8) and reservations that never overlap on a GPU.
"""

from __future__ import annotations

import argparse
import bisect
import contextlib
import functools
import os
import random
import secrets
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import _common as common
import asyncpg
import sqlalchemy
from sqlalchemy import insert, text
from sqlalchemy.ext.asyncio import AsyncEngine

from services.reservations.tables import gpu_slots, gpus, reservations

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

USERS = [f"user{i:02d}" for i in range(50)]
ADMIN = "admin"
HOSTS = [f"node{i:02d}" for i in range(1, 26)]
GPUS_PER_HOST = 8
GPU_MODELS = (("NVIDIA A100-SXM4-40GB", 40_960.0), ("NVIDIA H100 80GB HBM3", 81_559.0))

HALF_HOUR_MS = 30 * 60 * 1000
HOUR_MS = 2 * HALF_HOUR_MS
WEEK_MS = 7 * 24 * HOUR_MS
SEED_PAST = 4 * WEEK_MS
SEED_AHEAD = 8 * WEEK_MS
SEED_SIZES = ((1, 85), (2, 8), (4, 5), (8, 2))  # GPUs per seeded reservation, weight
SEED_TITLES = ("training", "fine-tune", "eval", "sweep", "debug", "inference test")
CHUNK = 2_000  # rows per executemany

# --- databases ----------------------------------------------------------------------------------


def pg_admin_url(args: argparse.Namespace) -> str:
    return str(args.pg_url or os.environ.get("WARDEN_BENCH_PG_URL") or DEFAULT_PG_URL)


def _pg_database_url(admin_url: str, database: str) -> str:
    """postgresql://u@h/postgres -> postgresql+asyncpg://u@h/<database> (for SQLAlchemy)."""
    parts = urlsplit(admin_url)
    return urlunsplit(parts._replace(scheme="postgresql+asyncpg", path=f"/{database}"))


def hide_password(url: str) -> str:
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


@contextlib.asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[tuple[str, str]]:
    """A fresh database on the server of `admin_url`: yields (SQLAlchemy URL, server version).

    Raises OSError (or asyncpg's errors) when the server cannot be reached.
    """
    name = f"warden_bench_{secrets.token_hex(4)}"
    admin = await asyncpg.connect(admin_url, timeout=5)
    try:
        version = str(await admin.fetchval("SHOW server_version"))
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    try:
        yield _pg_database_url(admin_url, name), version
    finally:
        admin = await asyncpg.connect(admin_url, timeout=10)
        try:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        finally:
            await admin.close()


# --- seeding ------------------------------------------------------------------------------------


@functools.cache  # (asked for per call: the load generator's CPU is the service's too)
def gpu_uuids_by_host() -> dict[str, list[str]]:
    return {host: [f"GPU-{host}-{i}" for i in range(GPUS_PER_HOST)] for host in HOSTS}


def gpu_rows(now_ms: int) -> list[dict[str, Any]]:
    """25 hosts x 8 GPUs: the first half A100s, the second half H100s."""
    rows = []
    total = len(HOSTS) * GPUS_PER_HOST
    for h, host in enumerate(HOSTS):
        for index in range(GPUS_PER_HOST):
            n = h * GPUS_PER_HOST + index
            name, memory = GPU_MODELS[0] if n < total // 2 else GPU_MODELS[1]
            rows.append(
                {
                    "uuid": f"GPU-{host}-{index}",
                    "host": host,
                    "gpu_index": index,
                    "name": name,
                    "memory_total_mib": memory,
                    "present": True,
                    "first_seen_ms": now_ms - SEED_PAST,
                    "last_change_ms": now_ms - SEED_PAST,
                }
            )
    return rows


@dataclass(frozen=True)
class Planned:
    owner: str
    gpus: tuple[str, ...]
    start_ms: int
    end_ms: int


class Timeline:
    """Busy intervals of one GPU, sorted and disjoint."""

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []

    def free(self, start: int, end: int) -> bool:
        i = bisect.bisect_left(self.starts, end)  # intervals starting before `end`
        return i == 0 or self.ends[i - 1] <= start

    def take(self, start: int, end: int) -> None:
        i = bisect.bisect_left(self.starts, start)
        self.starts.insert(i, start)
        self.ends.insert(i, end)


def plan_reservations(rng: random.Random, count: int, now_ms: int) -> list[Planned]:
    """`count` reservations that never overlap on a GPU, placed at random (big ones first)."""
    sizes = sorted(
        rng.choices([s for s, _ in SEED_SIZES], [w for _, w in SEED_SIZES], k=count), reverse=True
    )
    by_host = gpu_uuids_by_host()
    timelines = {uuid: Timeline() for uuids in by_host.values() for uuid in uuids}
    origin = now_ms - now_ms % HALF_HOUR_MS - SEED_PAST
    half_hours = (SEED_PAST + SEED_AHEAD) // HALF_HOUR_MS
    planned: list[Planned] = []
    for size in sizes:
        while True:  # a crowded host: try again, smaller after many misses
            for _ in range(200):
                duration = rng.randint(2, 24) * HALF_HOUR_MS  # 1-12 h
                start = origin + rng.randrange(half_hours - duration // HALF_HOUR_MS) * HALF_HOUR_MS
                chosen = rng.sample(by_host[rng.choice(HOSTS)], size)
                end = start + duration
                if all(timelines[uuid].free(start, end) for uuid in chosen):
                    for uuid in chosen:
                        timelines[uuid].take(start, end)
                    planned.append(Planned(rng.choice(USERS), tuple(sorted(chosen)), start, end))
                    break
            else:
                size = max(1, size // 2)
                continue
            break
    return planned


def reservation_rows(
    rng: random.Random, plan: Sequence[Planned], now_ms: int
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Rows of `reservations` and `reservations_gpu_slots` (ids 1..n), with the started/ended
    events of the past already sent, as a service that ran all along would have."""
    rows: list[dict[str, Any]] = []
    slots: list[dict[str, Any]] = []
    for rid, p in enumerate(plan, start=1):
        created = min(now_ms - HOUR_MS, p.start_ms - rng.randint(1, 14 * 24) * HOUR_MS)
        rows.append(
            {
                "id": rid,
                "owner": p.owner,
                "title": rng.choice(SEED_TITLES),
                "description": "",
                "start_ms": p.start_ms,
                "end_ms": p.end_ms,
                "status": "active",
                "created_by": p.owner,
                "created_at_ms": created,
                "updated_at_ms": created,
                "cancelled_by_rules": False,
                "started_event_ms": p.start_ms if p.start_ms <= now_ms else None,
                "ended_event_ms": p.end_ms if p.end_ms <= now_ms else None,
            }
        )
        slots.extend(
            {
                "reservation_id": rid,
                "gpu_uuid": uuid,
                "owner": p.owner,
                "start_ms": p.start_ms,
                "end_ms": p.end_ms,
                "active": True,
            }
            for uuid in p.gpus
        )
    return rows, slots


async def insert_chunks(engine: AsyncEngine, table: sqlalchemy.Table, rows: list[Any]) -> None:
    async with engine.begin() as conn:
        for i in range(0, len(rows), CHUNK):
            await conn.execute(insert(table), rows[i : i + CHUNK])


async def seed(engine: AsyncEngine, count: int, rng_seed: int, now_ms: int) -> dict[str, int]:
    """Accounts, GPUs and `count` reservations (drawn with `rng_seed`); returns what was made."""
    await common.create_accounts(
        engine, [(u, False) for u in USERS] + [(ADMIN, True)], "bench-password"
    )
    rng = random.Random(rng_seed)
    await insert_chunks(engine, gpus, gpu_rows(now_ms))
    plan = plan_reservations(rng, count, now_ms)
    rows, slots = reservation_rows(rng, plan, now_ms)
    await insert_chunks(engine, reservations, rows)
    await insert_chunks(engine, gpu_slots, slots)
    if engine.dialect.name == "postgresql":  # explicit ids do not move the sequence
        async with engine.begin() as conn:
            await conn.execute(
                text("SELECT setval(pg_get_serial_sequence('reservations', 'id'), :n)"),
                {"n": len(rows)},
            )
    return {
        "users": len(USERS) + 1,
        "gpus": len(HOSTS) * GPUS_PER_HOST,
        "reservations": len(rows),
        "gpu_slots": len(slots),
    }
