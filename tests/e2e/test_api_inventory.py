"""The inventory through the API (admin only): list, check, add, edit and remove a host of the
simulated fleet, its GPUs live on /hosts without a restart; refusals with their statuses; the
live stream showing non-admins only a host's name and labels."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiClient, ApiSystem, running_system
from tests.e2e.test_api_stream import open_stream

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

PATH = "/inventory/hosts"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-inventory"), hosts=3, gpus=2) as s:
        yield s


async def _hosts_now(client: ApiClient) -> dict[str, dict[str, Any]]:
    answer = await client.get("/hosts")
    assert answer.status == 200, answer.body
    return {h["name"]: h for h in answer.body["hosts"]}


async def test_an_admin_removes_checks_and_adds_a_host_live(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    listed = await admin.get(PATH)
    assert listed.status == 200, listed.body
    hosts = {h["name"]: h for h in listed.body["hosts"]}
    assert set(hosts) == set(system.fleet.hosts)
    name = system.fleet.hosts[2]
    record = hosts[name]
    assert record["source"] == "config" and record["probe"] == "ssh"
    one = await admin.get(f"{PATH}/{name}")
    assert one.status == 200 and one.body == record

    async def its_gpus() -> list[dict[str, Any]]:
        return list((await _hosts_now(admin))[name]["gpus"])

    gpu = (await system.until(its_gpus, f"the GPUs of {name}"))[0]
    removed = await admin.delete(f"{PATH}/{name}")
    assert removed.status == 200 and removed.body == record
    assert (await admin.get(f"{PATH}/{name}")).status == 404
    assert (await admin.delete(f"{PATH}/{name}")).status == 404

    async def gone() -> bool:
        return name not in await _hosts_now(admin)

    await system.until(gone, f"{name} gone from /hosts")
    alice = await system.as_user("alice")
    # Its GPU takes no new booking: well-formed, not allowed, so 422 with the reason.
    booking = {"gpus": [gpu["uuid"]], "title": "later", "duration_minutes": 60}
    tries = iter(range(1, 1000))

    async def refused() -> Any:
        later = datetime.now(UTC) + timedelta(days=next(tries))  # a new slot each try
        answer = await alice.post("/reservations", {**booking, "start": later.isoformat()})
        return answer if answer.status != 201 else None

    answer = await system.until(refused, f"a booking on {name} refused")
    assert answer.status == 422, answer.body
    assert answer.body["error"] == "validation_failed"
    assert f"GPU {name}:{gpu['index']} is not offered: {name} was removed" in answer.body["message"]
    assert answer.body["details"]["reasons"][0]["code"] == "not_offered"

    fields = {k: record[k] for k in ("address", "port", "user", "key_file")}
    check = await admin.post(f"{PATH}/check", {"name": name, **fields})
    assert check.status == 200, check.body
    assert check.body["ok"] and check.body["host_key"]["status"] == "trusted"
    assert check.body["host_key"]["fingerprint"].startswith("SHA256:")
    assert len(check.body["gpus"]) == 2

    stream = await open_stream(system, "alice", topics="hosts")
    try:
        body = {
            "name": name,
            **fields,
            "labels": ["lab-b"],
            "host_key": check.body["host_key"]["line"],
        }
        added = await admin.post(PATH, body)
        assert added.status == 201, added.body
        assert added.body["source"] == "api" and added.body["labels"] == ["lab-b"]
        assert added.body["host_key"] == check.body["host_key"]["line"]
        # alice sees that a host came, not how Warden reaches it.
        _, event = await stream.next("host.added")
        assert event["data"] == {"host": {"name": name, "labels": ["lab-b"]}}
    finally:
        stream.response.close()

    async def live() -> bool:
        host = (await _hosts_now(admin)).get(name)
        return bool(host and host["reachable"] and len(host["gpus"]) == 2)

    await system.until(live, f"{name} and its GPUs back on /hosts")
    assert (await admin.post(PATH, body)).status == 409

    assert (await _hosts_now(alice))[name]["labels"] == ["lab-b"]  # the dashboard's filter

    edited = await admin.patch(f"{PATH}/{name}", {"labels": ["lab-c"]})
    assert edited.status == 200 and edited.body["labels"] == ["lab-c"]

    async def relabeled() -> bool:
        return bool((await _hosts_now(alice))[name]["labels"] == ["lab-c"])

    await system.until(relabeled, f"{name} with its new label on /hosts")
    again = await admin.post(f"{PATH}/{name}/check", {})
    assert again.status == 200 and again.body["host_key"]["status"] == "trusted"


async def test_bad_input_is_refused_with_a_reason(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    no_address = await admin.post(PATH, {"name": "dgx9", "user": "warden"})
    assert no_address.status == 422 and "address" in no_address.body["details"]["errors"]
    bad_name = await admin.post(PATH, {"name": "no spaces", "address": "a", "user": "u"})
    assert bad_name.status == 422
    bad_port = await admin.patch(f"{PATH}/{system.fleet.hosts[0]}", {"port": 0})
    assert bad_port.status == 422
    bad_key = await admin.patch(f"{PATH}/{system.fleet.hosts[0]}", {"host_key": "no key"})
    assert bad_key.status == 400 and "host_key" in bad_key.body["message"]
    unknown = await admin.patch(f"{PATH}/nope", {"labels": []})
    assert unknown.status == 404 and unknown.body["error"] == "not_found"
    assert (await admin.post(f"{PATH}/nope/check", {})).status == 404


async def test_only_admins_may_see_or_change_the_inventory(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    name = system.fleet.hosts[0]
    calls = [
        ("GET", PATH, None),
        ("POST", PATH, {"name": "x1", "address": "127.0.0.1", "user": "warden"}),
        ("GET", f"{PATH}/{name}", None),
        ("PATCH", f"{PATH}/{name}", {"labels": ["x"]}),
        ("DELETE", f"{PATH}/{name}", None),
        ("POST", f"{PATH}/check", {"address": "127.0.0.1", "user": "warden"}),
        ("POST", f"{PATH}/{name}/check", {}),
    ]
    for method, path, body in calls:
        refused = await alice.request(method, path, json=body)
        assert refused.status == 403 and refused.body["error"] == "forbidden", (method, path)
        anonymous = await system.anonymous().request(method, path, json=body)
        assert anonymous.status == 401, (method, path)
    admin = await system.as_user("admin")
    assert name in {h["name"] for h in (await admin.get(PATH)).body["hosts"]}
