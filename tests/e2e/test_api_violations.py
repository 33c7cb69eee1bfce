"""Violations through the API: real incidents on the simulated fleet (someone's process on a GPU
reserved by another), who sees them in the list and in detail, filters and paging. One embedded
system for the module.

Incident 1: carol (a user of the sim, no Warden account) runs a process on a GPU alice
reserves. Incident 2: bob runs a process on a GPU admin reserves.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiClient, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

# Only a terminal message (which may fail: nobody is logged in): nothing ends the processes,
# so the incidents stay open while the module runs.
STEPS = ["0s terminal offender"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(
        tmp_path_factory.mktemp("api-violations"),
        config={"violations": {"steps": STEPS}},
    ) as system:
        yield system


async def _incident(
    system: ApiSystem, host_index: int, gpu_index: int, owner: str, offender: str
) -> dict[str, Any]:
    """`offender` runs a process on a GPU, then `owner` reserves it from now: the incident."""
    gpu = await system.gpu(host_index, gpu_index)
    host = system.fleet.hosts[host_index]
    pid = system.fleet.start_process(host, gpu_index, offender, "python borrow_gpu.py")
    client = await system.as_user(owner)
    booked = await client.post(
        "/reservations",
        {
            "gpus": [gpu["uuid"]],
            "start": datetime.now(UTC).isoformat(),
            "duration_minutes": 60,
            "title": f"{owner}'s experiment",
        },
    )
    assert booked.status == 201, booked.body
    admin = await system.as_user("admin")

    async def opened() -> dict[str, Any] | None:
        found = await admin.get("/violations", reservation_id=booked.body["id"])
        assert found.status == 200, found.body
        return found.body["items"][0] if found.body["items"] else None

    incident = await system.until(opened, f"the incident of {offender} on {owner}'s GPU")
    assert incident["offender"] == offender
    assert incident["owner"] == owner
    assert incident["gpu_uuid"] == gpu["uuid"]
    assert (incident["host"], incident["gpu_index"]) == (host, gpu_index)
    assert [p["pid"] for p in incident["processes"]] == [pid]
    return dict(incident)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def carols(system: ApiSystem) -> dict[str, Any]:
    """carol's process on alice's GPU (carol is a sim user, not one of our accounts)."""
    return await _incident(system, 0, 2, owner="alice", offender="carol")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def bobs(system: ApiSystem) -> dict[str, Any]:
    """bob's process on admin's GPU."""
    return await _incident(system, 1, 1, owner="admin", offender="bob")


def _ids(answer: Any) -> list[str]:
    return [item["id"] for item in answer.body["items"]]


async def test_admin_sees_every_incident_and_filters_them(
    system: ApiSystem, carols: dict[str, Any], bobs: dict[str, Any]
) -> None:
    admin = await system.as_user("admin")
    everything = await admin.get("/violations")
    assert everything.status == 200
    assert {carols["id"], bobs["id"]} <= set(_ids(everything))
    assert everything.body["total"] == len(everything.body["items"])
    assert (everything.body["limit"], everything.body["offset"]) == (50, 0)
    item = next(i for i in everything.body["items"] if i["id"] == carols["id"])
    assert item["status"] == "open"
    assert item["reservation_id"] == carols["reservation_id"]
    assert item["resolved_at"] is None
    assert item["steps"] == STEPS

    assert _ids(await admin.get("/violations", offender="carol")) == [carols["id"]]
    assert _ids(await admin.get("/violations", owner="admin")) == [bobs["id"]]
    assert _ids(await admin.get("/violations", gpu_uuid=bobs["gpu_uuid"])) == [bobs["id"]]
    on_host = await admin.get("/violations", host=carols["host"])
    assert carols["id"] in _ids(on_host) and bobs["id"] not in _ids(on_host)
    assert set(_ids(await admin.get("/violations", status="open"))) >= {carols["id"], bobs["id"]}
    assert _ids(await admin.get("/violations", status="resolved")) == []
    later = (datetime.now(UTC) + timedelta(hours=1)).isoformat()
    assert _ids(await admin.get("/violations", opened_after=later)) == []
    assert carols["id"] in _ids(await admin.get("/violations", opened_before=later))


async def test_paging_takes_limit_and_offset(
    system: ApiSystem, carols: dict[str, Any], bobs: dict[str, Any]
) -> None:
    admin = await system.as_user("admin")
    first = await admin.get("/violations", limit=1)
    second = await admin.get("/violations", limit=1, offset=1)
    assert first.status == second.status == 200
    assert first.body["total"] == second.body["total"] >= 2
    assert (first.body["limit"], second.body["offset"]) == (1, 1)
    assert len(first.body["items"]) == len(second.body["items"]) == 1
    assert _ids(first) != _ids(second)
    beyond = await admin.get("/violations", offset=first.body["total"])
    assert beyond.body["items"] == [] and beyond.body["total"] == first.body["total"]


async def test_the_owner_sees_their_incident_in_the_list_and_in_detail(
    system: ApiSystem, carols: dict[str, Any], bobs: dict[str, Any]
) -> None:
    alice = await system.as_user("alice")
    mine = await alice.get("/violations")
    assert mine.status == 200
    assert _ids(mine) == [carols["id"]]  # not bob's on admin's GPU
    assert mine.body["total"] == 1
    detail = await alice.get(f"/violations/{carols['id']}")
    assert detail.status == 200, detail.body
    assert detail.body["id"] == carols["id"]
    assert detail.body["offender"] == "carol"
    timeline = detail.body["timeline"]
    assert timeline and timeline[0]["kind"] == "opened"
    assert all(datetime.fromisoformat(entry["at"]).tzinfo for entry in timeline)
    # alice's other filters apply within hers
    assert _ids(await alice.get("/violations", offender="bob")) == []
    assert _ids(await alice.get("/violations", offender="carol")) == [carols["id"]]


async def test_the_offender_sees_their_incident(
    system: ApiSystem, carols: dict[str, Any], bobs: dict[str, Any]
) -> None:
    # carol has no account here: only bob's incident shows an offender's view.
    bob = await system.as_user("bob")
    mine = await bob.get("/violations")
    assert mine.status == 200
    assert _ids(mine) == [bobs["id"]]
    detail = await bob.get(f"/violations/{bobs['id']}")
    assert detail.status == 200, detail.body
    assert detail.body["offender"] == "bob" and detail.body["owner"] == "admin"
    assert isinstance(detail.body["timeline"], list)


async def test_an_uninvolved_user_sees_nothing_of_it(
    system: ApiSystem, carols: dict[str, Any], bobs: dict[str, Any]
) -> None:
    bob, alice = await system.as_user("bob"), await system.as_user("alice")
    # Asking for alice's incidents (or carol's) gives bob nothing: he is in none of them.
    for client, params in (
        (bob, {"owner": "alice"}),
        (bob, {"offender": "carol"}),
        (bob, {"reservation_id": carols["reservation_id"]}),
        (alice, {"owner": "admin"}),
    ):
        answer = await client.get("/violations", **params)
        assert answer.status == 200
        assert answer.body["items"] == [] and answer.body["total"] == 0, params
    for client, incident in ((bob, carols), (alice, bobs)):
        refused = await client.get(f"/violations/{incident['id']}")
        assert refused.status == 403
        assert refused.body["error"] == "forbidden"
        assert incident["offender"] not in json.dumps(refused.body)


async def test_an_unknown_incident_is_404(system: ApiSystem) -> None:
    for user in ("admin", "alice"):
        client = await system.as_user(user)
        missing = await client.get("/violations/no-such-incident")
        assert missing.status == 404
        assert missing.body["error"] == "not_found"


async def test_anonymous_callers_get_401(system: ApiSystem, carols: dict[str, Any]) -> None:
    for path in ("/violations", f"/violations/{carols['id']}"):
        answer = await system.anonymous().get(path)
        assert answer.status == 401
        assert answer.body["error"] == "authentication_required"


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"limit": "many"}, "limit"),
        ({"offset": "-1"}, "offset"),
        ({"status": "closed"}, "status"),
        ({"reservation_id": "abc"}, "reservation_id"),
        ({"reservation_id": "0"}, "reservation_id"),
        ({"opened_after": "yesterday"}, "opened_after"),
        ({"opened_before": "2024-01-01T00:00:00"}, "opened_before"),  # no offset
        (
            {"opened_after": "2024-02-01T00:00:00+00:00", "opened_before": "2024-01-01T00:00:00Z"},
            "opened_before",
        ),
        ({"offender": ""}, "offender"),
        ({"colour": "red"}, "colour"),
    ],
)
async def test_bad_filters_are_422_with_the_field(
    system: ApiSystem, params: dict[str, str], field: str
) -> None:
    client: ApiClient = await system.as_user("alice")
    answer = await client.get("/violations", **params)
    assert answer.status == 422, answer.body
    assert answer.body["error"] == "validation_failed"
    assert field in answer.body["details"]["errors"]


async def test_a_too_long_incident_id_is_422(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    answer = await admin.get("/violations/" + "x" * 65)
    assert answer.status == 422
    assert "id" in answer.body["details"]["errors"]
