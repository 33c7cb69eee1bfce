"""Conditional GETs over real HTTP: GET /gpus and calendar ranges answer with a strong ETag and
`Cache-Control: no-cache`, 304 to a client whose copy is current, a new tag once a reservation
or a sample changes the answer, and never a 304 to another user for what only one may see."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiClient, ApiSystem, Response, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-etag"), hosts=2, gpus=2) as s:
        yield s


async def _get(client: ApiClient, path: str, tag: str | None = None, **params: Any) -> Response:
    headers = {"If-None-Match": tag} if tag else None
    return await client.request("GET", path, params=params or None, headers=headers)


def _tagged(answer: Response) -> str:
    assert answer.status == 200, answer.body
    assert answer.headers["Cache-Control"] == "no-cache"
    tag = answer.headers["ETag"]
    assert tag.startswith('"') and tag.endswith('"') and not tag.startswith("W/")
    return str(tag)


async def _until_not_modified(
    system: ApiSystem, client: ApiClient, path: str, **params: Any
) -> str:
    """The tag of the current answer once a request with it answers 304 (GET /gpus changes
    with every sample: a new tag in between is taken and tried again)."""
    tag = _tagged(await _get(client, path, **params))

    async def not_modified() -> bool:
        nonlocal tag
        answer = await _get(client, path, tag, **params)
        if answer.status == 200:
            tag = _tagged(answer)
            return False
        assert answer.status == 304 and answer.body == ""
        assert answer.headers["ETag"] == tag and answer.headers["Cache-Control"] == "no-cache"
        return True

    await system.until(not_modified, f"a 304 on {path}")
    return tag


def _window() -> dict[str, str]:
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(days=2)
    return {"start": start.isoformat(), "end": (start + timedelta(days=1)).isoformat()}


async def _book(client: ApiClient, gpu: dict[str, Any], start: datetime, **more: Any) -> int:
    answer = await client.post(
        "/reservations",
        {
            "gpus": [gpu["uuid"]],
            "start": start.isoformat(),
            "duration_minutes": 60,
            "title": "etag",
            **more,
        },
    )
    assert answer.status == 201, answer.body
    return int(answer.body["id"])


async def test_gpus_answer_304_while_current_and_a_new_tag_after_a_sample(
    system: ApiSystem,
) -> None:
    alice = await system.as_user("alice")
    tag = await _until_not_modified(system, alice, "/gpus")
    # Samples keep coming (every 0.5 s here): the tag goes stale and the answer comes again.

    async def sampled_again() -> bool:
        answer = await _get(alice, "/gpus", tag)
        return answer.status == 200 and _tagged(answer) != tag

    await system.until(sampled_again, "a new ETag on /gpus after a sample")
    # Weak comparison and lists, as RFC 9110 asks for If-None-Match.
    now = await _until_not_modified(system, alice, "/gpus")
    for header in (f'"nope", W/{now}', "*"):
        answer = await alice.request("GET", "/gpus", headers={"If-None-Match": header})
        assert answer.status in (200, 304)  # 200 only when a sample came in between
        if answer.status == 200:
            assert _tagged(answer) != now


async def test_gpus_new_tag_after_a_reservation_and_none_shared_between_users(
    system: ApiSystem,
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    gpu = await system.gpu(0, 0)
    tag = await _until_not_modified(system, alice, "/gpus")
    start = datetime.now(UTC).replace(microsecond=0) + timedelta(hours=2)
    rid = await _book(alice, gpu, start, description="alice's secret")
    answer = await _get(alice, "/gpus", tag)
    assert answer.status == 200 and _tagged(answer) != tag
    shown = {g["uuid"]: g for g in answer.body["gpus"]}[gpu["uuid"]]
    assert shown["next_reservation"]["id"] == rid
    assert shown["next_reservation"]["description"] == "alice's secret"

    mine = await _until_not_modified(system, alice, "/gpus")
    for other in (bob, await system.as_user("admin")):
        answer = await _get(other, "/gpus", mine)
        assert answer.status == 200, "a tag of alice's answer is no one else's"
        assert _tagged(answer) != mine
    theirs = {g["uuid"]: g for g in (await bob.get("/gpus")).body["gpus"]}[gpu["uuid"]]
    assert theirs["next_reservation"]["id"] == rid
    assert theirs["next_reservation"]["description"] == ""


async def test_calendar_range_304_until_a_reservation_on_its_gpus_changes(
    system: ApiSystem,
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    gpu, elsewhere = await system.gpu(1, 0), await system.gpu(1, 1)
    window = _window()
    query = {**window, "gpus": gpu["uuid"]}
    tag = _tagged(await _get(alice, "/reservations", **query))
    again = await _get(alice, "/reservations", tag, **query)
    assert again.status == 304 and again.body == "" and again.headers["ETag"] == tag

    # A booking on another GPU does not change this answer: still 304.
    start = datetime.fromisoformat(window["start"]) + timedelta(hours=3)
    await _book(alice, elsewhere, start)
    assert (await _get(alice, "/reservations", tag, **query)).status == 304
    # One on this GPU does: the answer, with a new tag.
    rid = await _book(alice, gpu, start, description="private plans")
    changed = await _get(alice, "/reservations", tag, **query)
    new_tag = _tagged(changed)
    assert new_tag != tag and [r["id"] for r in changed.body["items"]] == [rid]
    assert changed.body["items"][0]["description"] == "private plans"
    assert (await _get(alice, "/reservations", new_tag, **query)).status == 304

    # Bob sees it without its description: alice's tag is never a 304 for him.
    his = await _get(bob, "/reservations", new_tag, **query)
    assert his.status == 200 and _tagged(his) != new_tag
    assert his.body["items"][0]["description"] == ""

    # Cancelled: a new answer again.
    assert (await alice.delete(f"/reservations/{rid}")).status == 200
    after = await _get(alice, "/reservations", new_tag, **query)
    assert after.status == 200 and after.body["items"] == []


async def test_calendar_default_range_and_other_queries_are_tagged_too(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    tag = _tagged(await _get(alice, "/reservations"))
    assert (await _get(alice, "/reservations", tag)).status == 304
    paged = _tagged(await _get(alice, "/reservations", limit=1))
    assert paged != tag
    # A range the gateway's copy does not cover goes to the service: tagged all the same.
    far = datetime.now(UTC).replace(microsecond=0) + timedelta(weeks=60)
    query = {"start": far.isoformat(), "end": (far + timedelta(days=1)).isoformat()}
    far_tag = _tagged(await _get(alice, "/reservations", **query))
    assert (await _get(alice, "/reservations", far_tag, **query)).status == 304
