"""The queue through the API, on the simulated fleet over real SSH: fair share puts a light
user's job before a heavy user's queue, `GET /queue` says the order, why each job waits and
when it is predicted to start (from the running jobs' time limits), job answers carry the
predicted start, and the live stream's `queue.changed` event carries the queue."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from services.client.output import utc_now
from services.client.render import when as when_shown
from services.jobs.api import QueueSchema
from tests.e2e.api import ApiClient, ApiSystem, running_system
from tests.e2e.test_api_stream import open_stream
from tests.e2e.test_cli_client import Cli

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

FOREVER = "python train.py"  # the sim runs it until it is signalled
HOUR_S = 3600


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-queue")) as system:
        yield system


async def queue(client: ApiClient, name: str, runtime_s: int) -> int:
    created = await client.post(
        "/jobs",
        {
            "name": name,
            "queued": True,
            "max_runtime_s": runtime_s,
            "tasks": [{"command": FOREVER, "gpu_count": 4}],
        },
    )
    assert created.status == 201, created.body
    return int(created.body["id"])


def when(text: str | None) -> datetime:
    assert text is not None
    return datetime.fromisoformat(text)


async def test_a_light_users_job_goes_first_with_reasons_and_predicted_starts(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    viewer = await system.as_user("admin")  # any signed-in user reads the queue
    for host in (0, 1):  # the fleet's GPUs known to the services before anything is queued
        await system.gpu(host, 3)
    stream = await open_stream(system, "admin", topics="jobs")
    try:
        # alice fills both hosts (4 GPUs each) for an hour, then queues three more.
        running = [await queue(alice, f"fill-{i}", HOUR_S) for i in range(2)]
        started: list[datetime] = []
        for job_id in running:

            async def is_running(job_id: int = job_id) -> dict[str, Any] | None:
                job = (await alice.get(f"/jobs/{job_id}")).body
                return job if job["status"] == "running" else None

            job = await system.until(is_running, f"job {job_id} running")
            started.append(when(job["tasks"][0]["started_at"]))
        heavy = [await queue(alice, f"sweep-{i}", HOUR_S) for i in range(3)]
        light = await queue(bob, "debug", HOUR_S // 2)

        async def forecast() -> dict[str, Any] | None:
            answer = await viewer.get("/queue")
            assert answer.status == 200, answer.body
            jobs = answer.body["jobs"]
            done = len(jobs) == 4 and all(j["predicted_start"] for j in jobs[:3])
            return dict(answer.body) if done and jobs[0]["id"] == light else None

        got = await system.until(forecast, "the queue with bob's job first, forecast")
        QueueSchema().load(got)
        assert got["policy"] == "fair"
        assert [j["id"] for j in got["jobs"]] == [light, *heavy]
        assert [j["position"] for j in got["jobs"]] == [1, 2, 3, 4]
        first_end, second_end = sorted(s + timedelta(seconds=HOUR_S) for s in started)
        by_id = {j["id"]: j for j in got["jobs"]}
        # bob's job: when the first of alice's running jobs reaches its time limit
        assert when(by_id[light]["predicted_start"]) == first_end
        # alice's: after the second one's end, and after bob's job ends, each a little later
        # still for the jobs bob may queue meanwhile (his recent rate: 2 GPU-hours a day)
        now = when(got["at"])
        stretch = 1 / (1 - (4 * 0.5 / 24) / 8)
        for job_id, free_at in (
            (heavy[0], second_end),
            (heavy[1], first_end + timedelta(minutes=30)),
        ):
            expected = now + (free_at - now) * stretch
            assert abs(when(by_id[job_id]["predicted_start"]) - expected) < timedelta(seconds=1)
        assert "4 free GPUs" in by_id[light]["reason"]
        assert "behind 1 jobs of users with less usage" in by_id[heavy[0]]["reason"]
        users = {u["user"]: u for u in got["users"]}
        assert [u["user"] for u in got["users"]] == ["bob", "alice"]
        assert users["alice"]["usage_gpu_h"] > 0 and users["bob"]["usage_gpu_h"] == 0
        assert users["alice"]["share"] == users["bob"]["share"] == 0.5
        assert users["alice"]["running"] == 2 and users["alice"]["queued"] == 3

        job = (await bob.get(f"/jobs/{light}")).body
        assert job["predicted_start"] == by_id[light]["predicted_start"]

        async def event_with_bob_first() -> dict[str, Any]:
            while True:
                _, event = await stream.next("queue.changed")
                if event["data"]["jobs"] and event["data"]["jobs"][0]["id"] == light:
                    return dict(event["data"])

        seen = await event_with_bob_first()
        assert seen["jobs"][0]["owner"] == "bob"

        # `warden queue`, and `warden jobs`' STARTS column, as bob in a 200-column terminal
        monkeypatch.setenv("COLUMNS", "200")
        cli = Cli(system, tmp_path, monkeypatch, capsys)
        await _the_cli_shows_it(cli, light, heavy[0], by_id[light]["predicted_start"])
    finally:
        stream.response.close()
        for job_id in running:
            await alice.post(f"/jobs/{job_id}/stop")


async def test_the_queue_is_for_signed_in_users(system: ApiSystem) -> None:
    answer = await system.anonymous().get("/queue")
    assert answer.status == 401
    assert answer.body["error"] == "authentication_required"


async def _the_cli_shows_it(cli: Cli, light: int, heavy: int, light_start: str) -> None:
    await cli.login("bob")
    shown = await cli("queue")
    assert shown.code == 0, shown
    rows = [line for line in shown.out.splitlines() if "debug" in line or "sweep-" in line]
    assert f" {light} " in rows[0] and "debug" in rows[0] and "4 free GPUs" in rows[0]
    assert f" {heavy} " in rows[1] and "behind 1 jobs of users with less usage" in rows[1]
    assert "not within horizon" not in shown.out and "policy: fair" in shown.out
    listed = await cli("jobs", "--mine")
    assert listed.code == 0, listed
    [debug] = [line for line in listed.out.splitlines() if "debug" in line]
    assert debug.rstrip().endswith(when_shown(light_start, utc_now()))
    # --watch draws it, then again until Ctrl-C
    sleeps: list[int] = []

    def interrupted(seconds: int) -> None:
        sleeps.append(seconds)
        raise KeyboardInterrupt

    cli.monkeypatch.setattr("services.client.queue.time.sleep", interrupted)
    watched = await cli("queue", "--watch", "2")
    assert watched.code == 0 and sleeps == [2] and "debug" in watched.out
