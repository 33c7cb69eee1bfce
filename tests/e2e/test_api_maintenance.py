"""Maintenance windows end to end: the services on the in-process bus (the notification path
in the violations service), the gateway over HTTP, the simulated fleet.

An admin drains a GPU for a window; a booking in it is refused with the reason, the owner of a
booking it overlaps is told at once (in the browser, by default) with an alternative, and the
booking is kept. Only admins drain; anyone signed in lists the windows. A queued job waits
while the GPU it names is drained, and starts once the window is ended; a running job is left
alone by a drain unless the admin asks for it to be stopped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from services.shared.contracts import Envelope
from tests.e2e.api import ApiSystem, running_system
from tests.support.events import record

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

SERVICES = ["monitor", "reservations", "jobs", "violations", "gateway"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory,
) -> AsyncIterator[tuple[ApiSystem, list[Envelope], list[Envelope]]]:
    async with running_system(tmp_path_factory.mktemp("api-drain"), services=SERVICES) as system:
        sent: list[Envelope] = []
        await record(system.bus, sent, "violations", "notification.sent")
        announced: list[Envelope] = []
        await record(system.bus, announced, "reservations", "maintenance.*")
        yield system, sent, announced


def later(hours: float) -> str:
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    return (base + timedelta(hours=hours)).isoformat()


async def test_a_drain_refuses_bookings_in_it_and_tells_the_owner_of_an_overlapping_one(
    system: tuple[ApiSystem, list[Envelope], list[Envelope]],
) -> None:
    api, sent, _announced = system
    alice, admin = await api.as_user("alice"), await api.as_user("admin")
    gpu = await api.gpu(0, 0)
    booked = await alice.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": later(1), "end": later(3), "title": "sweep"},
    )
    assert booked.status == 201, booked.body

    refused = await alice.post("/maintenance", {"host": gpu["host"], "gpus": [0], "reason": "mine"})
    assert refused.status == 403
    drained = await admin.post(
        "/maintenance",
        {
            "host": gpu["host"],
            "gpus": [0],
            "start": later(2),
            "end": later(6),
            "reason": "replacing a fan",
        },
    )
    assert drained.status == 201, drained.body
    (hit,) = drained.body["affected"]
    assert hit["reservation_id"] == booked.body["id"] and hit["outcome"] == "kept"
    alternative = hit["alternative"]
    assert alternative is not None and alternative["gpus"][0]["uuid"] != gpu["uuid"]

    # A new booking in the window: 409 with the window and its reason.
    clash = await alice.post(
        "/reservations",
        {"gpus": [f"{gpu['host']}:0"], "start": later(4), "end": later(5), "title": "x"},
    )
    assert clash.status == 409, clash.body
    (reason,) = clash.body["details"]["reasons"]
    assert reason["code"] == "maintenance" and reason["reason"] == "replacing a fan"
    assert "replacing a fan" in clash.body["message"]

    # The owner is told at once, with the alternative.
    def told() -> list[dict[str, Any]]:
        return [
            e.data for e in sent if e.data["user"] == "alice" and e.data["kind"] == "maintenance"
        ]

    async def notice() -> list[dict[str, Any]]:
        return told()

    await api.until(notice, "alice told of the drain")
    (note,) = told()
    assert "replacing a fan" in note["text"] and "kept as it is" in note["text"]
    where = f"GPU {alternative['gpus'][0]['host']}:{alternative['gpus'][0]['index']}"
    assert f"alternative is {where}" in note["text"]
    mine = await alice.get(f"/reservations/{booked.body['id']}")
    assert mine.body["status"] == "active"  # kept: cancelled only when the admin says so

    # Everyone sees the window; the admin ends it and the GPU is bookable again.
    listed = await alice.get("/maintenance")
    assert listed.status == 200
    assert [w["id"] for w in listed.body] == [drained.body["id"]]
    assert (await alice.request("DELETE", f"/maintenance/{drained.body['id']}")).status == 403
    ended = await admin.request("DELETE", f"/maintenance/{drained.body['id']}")
    assert ended.status == 200 and ended.body["status"] == "removed"
    again = await alice.post(
        "/reservations",
        {"gpus": [f"{gpu['host']}:0"], "start": later(4), "end": later(5), "title": "x"},
    )
    assert again.status == 201, again.body


async def test_a_queued_job_waits_for_a_drained_gpu_until_the_window_ends(
    system: tuple[ApiSystem, list[Envelope], list[Envelope]],
) -> None:
    api, _sent, _announced = system
    alice, bob, admin = [await api.as_user(name) for name in ("alice", "bob", "admin")]
    gpu = await api.gpu(1, 2)
    now = datetime.now(UTC).replace(microsecond=0).isoformat()
    held = await bob.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": now, "duration_minutes": 60, "title": "bob's"},
    )
    assert held.status == 201, held.body
    job = await alice.post(
        "/jobs",
        {
            "name": "waits",
            "queued": True,
            "max_runtime_s": 600,
            "tasks": [{"command": "sleep 1", "host": gpu["host"], "gpus": [2]}],
        },
    )
    assert job.status == 201, job.body

    def waiting_for(words: str) -> Callable[[], Awaitable[str | None]]:
        async def reason() -> str | None:
            found = await alice.get(f"/jobs/{job.body['id']}")
            said = found.body.get("waiting_reason")
            return said if said and words in said else None

        return reason

    await api.until(waiting_for("reserved by bob"), "the queued job waiting for bob's booking")
    drained = await admin.post(
        "/maintenance", {"host": gpu["host"], "gpus": [2], "reason": "reseating the GPU"}
    )
    assert drained.status == 201, drained.body
    assert [a["owner"] for a in drained.body["affected"]] == ["bob"]
    # The queue learns of the window from its event: the job now waits for it.
    await api.until(waiting_for("drained for maintenance"), "the job waiting for the window")
    ended_booking = await bob.post(f"/reservations/{held.body['id']}/end")
    assert ended_booking.status == 200, ended_booking.body
    ended = await admin.request("DELETE", f"/maintenance/{drained.body['id']}")
    assert ended.status == 200 and ended.body["status"] == "ended"

    async def started() -> bool:
        found = await alice.get(f"/jobs/{job.body['id']}")
        return found.body["status"] != "queued"

    await api.until(started, "the job starting once the window ended")


async def test_running_jobs_are_stopped_only_when_the_admin_asks(
    system: tuple[ApiSystem, list[Envelope], list[Envelope]],
) -> None:
    api, _sent, _announced = system
    alice, admin = await api.as_user("alice"), await api.as_user("admin")
    gpu = await api.gpu(1, 3)

    async def run_job(name: str) -> int:
        made = await alice.post(
            "/jobs",
            {"name": name, "tasks": [{"command": "sleep 600", "host": gpu["host"], "gpus": [3]}]},
        )
        assert made.status == 201, made.body
        started = await alice.post(f"/jobs/{made.body['id']}/start")
        assert started.status == 200, started.body

        async def running() -> bool:
            return (await alice.get(f"/jobs/{made.body['id']}")).body["status"] == "running"

        await api.until(running, f"job {name} running")
        return int(made.body["id"])

    kept = await run_job("kept")
    left = await admin.post(
        "/maintenance", {"host": gpu["host"], "gpus": [3], "reason": "looking only"}
    )
    assert left.status == 201 and left.body["stop_jobs"] is False
    assert (await admin.request("DELETE", f"/maintenance/{left.body['id']}")).status == 200
    stopped = await admin.post(
        "/maintenance",
        {"host": gpu["host"], "gpus": [3], "reason": "swapping it", "stop_jobs": True},
    )
    assert stopped.status == 201 and stopped.body["stop_jobs"] is True

    async def ended() -> dict[str, Any] | None:
        found = (await alice.get(f"/jobs/{kept}")).body
        return found if found["status"] not in ("running", "stopping") else None

    job = await api.until(ended, "the job stopped for the maintenance")
    assert "maintenance of" in str(job.get("stop_reason")) and "swapping it" in str(
        job.get("stop_reason")
    )
    assert (await admin.request("DELETE", f"/maintenance/{stopped.body['id']}")).status == 200
