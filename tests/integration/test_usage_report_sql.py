"""The reservations' usage report in SQL (`held_query`) gives what the rule row by row
(`reservation_facts`) gives, on SQLite and on PostgreSQL, for random bookings: active and
cancelled (before and after their start), measured and not, inside, across and outside the
period."""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
from sqlalchemy import insert

from services.reservations.tables import gpu_slots, reservations
from services.reservations.usage.report import (
    held_query,
    reservation_facts,
    summed_facts,
)
from services.shared.storage import db
from services.shared.storage.store import Store

H = 3_600_000
P0, P1 = 100 * H, 400 * H
USERS = ("alice", "bob", "carol")
GPUS = ("g0", "g1", "g2", "g3")  # and g9, dave's


def _bookings(rng: random.Random) -> list[dict[str, Any]]:
    found, rid = [], 0
    for gpu in GPUS:
        at = rng.randrange(0, 50) * H
        while at < 500 * H:
            rid += 1
            length = rng.randrange(1, 30) * H + rng.randrange(0, H)
            cancelled = rng.random() < 0.2
            samples = rng.choice([0, 10, 500])
            found.append(
                {
                    "id": rid,
                    "gpu": gpu,
                    "owner": rng.choice(USERS),
                    "start_ms": at,
                    "end_ms": at + length,
                    "status": "cancelled" if cancelled else "active",
                    "cancelled_at_ms": at + rng.randrange(-H, length) if cancelled else None,
                    "usage": None
                    if rng.random() < 0.1
                    else {"totals": {"gpu_samples": samples, "idle_samples": samples // 3}},
                }
            )
            at += length + rng.randrange(0, 10) * H
    # dave's one booking was never measured
    found.append(
        {
            "id": rid + 1,
            "gpu": "g9",
            "owner": "dave",
            "start_ms": 150 * H,
            "end_ms": 160 * H,
            "status": "active",
            "cancelled_at_ms": None,
            "usage": None,
        }
    )
    return found


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    if request.param == "sqlite":
        return f"sqlite+aiosqlite:///{tmp_path / 'reservations.db'}"
    return str(request.getfixturevalue("pg_url"))


async def test_sql_sums_match_the_rule(database_url: str) -> None:
    bookings = _bookings(random.Random(7))
    engine = db.create_engine(database_url)
    try:
        await db.upgrade(engine, "reservations")
        async with Store(engine).write() as conn:
            for b in bookings:
                await conn.execute(
                    insert(reservations).values(
                        id=b["id"], owner=b["owner"], title="t", description="",
                        start_ms=b["start_ms"], end_ms=b["end_ms"], status=b["status"],
                        created_by=b["owner"], created_at_ms=0, updated_at_ms=0,
                        cancelled_at_ms=b["cancelled_at_ms"], cancelled_by_rules=False,
                        usage=b["usage"],
                    )
                )  # fmt: skip
                await conn.execute(
                    insert(gpu_slots).values(
                        reservation_id=b["id"], gpu_uuid=b["gpu"], owner=b["owner"],
                        start_ms=b["start_ms"], end_ms=b["end_ms"],
                        active=b["status"] == "active",
                    )
                )  # fmt: skip
        async with Store(engine).read() as conn:
            sums = [tuple(row) for row in await conn.execute(held_query(P0, P1))]
    finally:
        await engine.dispose()
    hosts = {gpu: "h" for gpu in (*GPUS, "g9")}
    expected = reservation_facts(
        [
            (b["owner"], b["gpu"], b["status"], b["start_ms"], b["end_ms"], b["cancelled_at_ms"],
             (b["usage"] or {}).get("totals", {}).get("gpu_samples"),
             (b["usage"] or {}).get("totals", {}).get("idle_samples"))
            for b in bookings
        ],
        hosts,
        P0,
        P1,
    )  # fmt: skip
    got = summed_facts(sums, hosts)
    key = lambda fact: (fact["user"], fact["gpu_uuid"])  # noqa: E731
    assert len(expected) > 6
    assert any("used_gpu_hours" not in fact for fact in expected)  # some never measured
    assert sorted(map(key, got)) == sorted(map(key, expected))
    by_key = {key(fact): fact for fact in got}
    for fact in expected:
        found = by_key[key(fact)]
        assert set(found) == set(fact), fact
        for name, value in fact.items():
            if isinstance(value, float):
                assert found[name] == pytest.approx(value, abs=1e-5), (name, fact)
    json.dumps(got)  # plain JSON values
