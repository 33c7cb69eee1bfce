"""What the docs and the OpenAPI document promise, checked through the API: an ended
reservation reads `ended`, rule changes answer what they cancelled, a rule made "now" covers a
booking made "now", ids are never reused, ranges and slots stay within their documented
bounds, a create sent again with its Idempotency-Key is booked once. One embedded system (SQLite:
where ids used to be reused)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-promises")) as system:
        yield system


def now() -> datetime:
    return datetime.now(UTC).replace(microsecond=0)


async def book(system: ApiSystem, username: str, gpu: int, start: datetime) -> dict[str, Any]:
    client = await system.as_user(username)
    target = await system.gpu(1, gpu)
    created = await client.post(
        "/reservations",
        {
            "gpus": [target["uuid"]],
            "start": start.isoformat(),
            "duration_minutes": 60,
            "title": f"{username} on {gpu}",
        },
    )
    assert created.status == 201, created.body
    return dict(created.body)


async def test_a_reservation_ended_early_reads_ended(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    running = await book(system, "alice", 0, now())
    assert running["status"] == "active"
    ended = await alice.post(f"/reservations/{running['id']}/end")
    assert ended.status == 200, ended.body
    assert ended.body["status"] == "ended"
    again = await alice.get(f"/reservations/{running['id']}")
    assert again.body["status"] == "ended"
    listed = await alice.get("/reservations", start=(now() - timedelta(hours=1)).isoformat())
    assert {r["id"]: r["status"] for r in listed.body["items"]}[running["id"]] == "ended"


async def test_a_rule_change_answers_what_it_cancelled_and_restored(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    booked = await book(system, "bob", 1, now() + timedelta(days=2))
    # Only rule of bob: the default one through the `users` group; take bob out of it and give
    # him a rule that excludes host 1, then widen it again.
    out = await admin.delete("/groups/users/members/bob")
    assert out.status == 200 and booked["id"] in out.body["cancelled"], out.body
    narrow = {"name": "bob elsewhere", "users": ["bob"], "hosts": [system.fleet.hosts[0]]}
    created = await admin.post("/rules", narrow)
    assert created.status == 201, created.body
    assert created.body["cancelled"] == [] and created.body["restored"] == []
    wide = await admin.put(f"/rules/{created.body['id']}", {**narrow, "all_gpus": True})
    assert wide.status == 200, wide.body
    assert wide.body["restored"] == [booked["id"]]
    assert wide.body["all_gpus"] is True  # the rule itself is still answered whole


async def test_a_rule_made_now_covers_a_booking_made_now(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    created = await admin.post(
        "/users", {"username": "dora", "email": "dora@lab.example", "password": "dora-pw-12345"}
    )
    assert created.status == 201, created.body
    out = await admin.delete("/groups/users/members/dora")
    assert out.status == 200
    rule = await admin.post("/rules", {"name": "dora now", "users": ["dora"], "all_gpus": True})
    assert rule.status == 201, rule.body
    assert datetime.fromisoformat(rule.body["valid_from"]) <= now() - timedelta(seconds=59)
    dora = await system.anonymous().post(
        "/session", {"username": "dora", "password": "dora-pw-12345"}
    )
    system.tokens["dora"] = dora.body["access_token"]
    # An admin chose the password: dora chooses her own before anything else.
    own = await (await system.as_user("dora")).patch("/users/dora", {"password": "dora-own-12345"})
    assert own.status == 200, own.body
    dora = await system.anonymous().post(
        "/session", {"username": "dora", "password": "dora-own-12345"}
    )
    system.tokens["dora"] = dora.body["access_token"]
    await book(system, "dora", 2, now().replace(second=0))


async def test_a_deleted_rules_id_is_never_given_to_another(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    body = {"name": "short-lived", "users": ["alice"], "all_gpus": True}
    first = await admin.post("/rules", body)
    assert first.status == 201
    assert (await admin.delete(f"/rules/{first.body['id']}")).status == 200
    second = await admin.post("/rules", body)
    assert second.status == 201
    assert second.body["id"] > first.body["id"]


async def test_ranges_and_slots_stay_within_their_documented_bounds(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    start = now()
    too_long = await alice.get(
        "/reservations", start=start.isoformat(), end=(start + timedelta(weeks=9)).isoformat()
    )
    assert too_long.status == 400, too_long.body
    assert too_long.body["details"]["field"] == "end"
    eight = await alice.get(
        "/reservations", start=start.isoformat(), end=(start + timedelta(weeks=8)).isoformat()
    )
    assert eight.status == 200
    short = await alice.get("/reservations/slot", count=1, duration_minutes=10)
    assert short.status == 400, short.body
    assert short.body["details"]["field"] == "duration_minutes"
    fine = await alice.get("/reservations/slot", count=1, duration_minutes=30)
    assert fine.status == 200, fine.body
    assert datetime.fromisoformat(fine.body["end"]) - datetime.fromisoformat(
        fine.body["start"]
    ) >= timedelta(minutes=30)


async def test_the_compact_overview_says_what_the_full_one_says(system: ApiSystem) -> None:
    bob = await system.as_user("bob")
    await book(system, "alice", 2, now() + timedelta(days=1))
    await book(system, "bob", 3, now() + timedelta(days=1))
    query = {"start": now().isoformat(), "end": (now() + timedelta(days=3)).isoformat()}
    full = await bob.get("/reservations/overview", **query)
    compact = await bob.get("/reservations/overview", **query, format="compact")
    assert full.status == 200 and compact.status == 200, (full.body, compact.body)
    labels = compact.body["labels"]
    states = set()
    for full_host, compact_host in zip(full.body["hosts"], compact.body["hosts"], strict=True):
        for full_gpu, compact_gpu in zip(full_host["gpus"], compact_host["gpus"], strict=True):
            cells, first, runs = compact_gpu.pop("cells"), 0, []
            for label, count in zip(cells[0::2], cells[1::2], strict=True):
                state, owner, reservation_id = labels[label]
                runs.append(
                    {
                        "first": first,
                        "count": count,
                        "state": state,
                        "owner": owner,
                        "reservation_id": reservation_id,
                    }
                )
                first += count
            assert runs == full_gpu.pop("runs")
            assert compact_gpu == full_gpu
            states.update(run["state"] for run in runs)
    assert {"mine", "taken"} <= states
    wrong = await bob.get("/reservations/overview", **query, format="tiny")
    assert wrong.status in (400, 422), wrong.body


async def test_a_create_sent_again_with_its_idempotency_key_is_booked_once(
    system: ApiSystem,
) -> None:
    alice = await system.as_user("alice")
    target = await system.gpu(0, 0)
    body = {
        "gpus": [f"{target['host']}:{target['index']}"],
        "start": (now() + timedelta(days=3)).isoformat(),
        "duration_minutes": 60,
        "title": "sent twice",
    }
    key = {"Idempotency-Key": "4b1f6a52-2d3c-4c43-9a55-0d1bde6f7f10"}
    first = await alice.request("POST", "/reservations", body, headers=key)
    assert first.status == 201, first.body
    again = await alice.request("POST", "/reservations", body, headers=key)
    assert (again.status, again.body) == (201, first.body)
    other = await alice.request("POST", "/reservations", {**body, "title": "another"}, headers=key)
    assert other.status == 422, other.body
    assert other.body["details"]["field"] == "Idempotency-Key"
    # Without the key, the same create is a second request: refused as taken by the first.
    plain = await alice.post("/reservations", body)
    assert plain.status == 409, plain.body
    bad = await alice.request("POST", "/reservations", body, headers={"Idempotency-Key": "a b"})
    assert bad.status == 400, bad.body
    assert bad.body["details"]["field"] == "Idempotency-Key"
