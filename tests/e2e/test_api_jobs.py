"""Jobs through the API: defining, previewing, starting on a simulated GPU host over real SSH,
logs, stopping, history, queueing, who may do what, and bad input answered without a 500.
One embedded system for the module."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio
from marshmallow import Schema

from services.gateway.routes.jobs import (
    JobDeletedSchema,
    JobHistorySchema,
    JobLogsSchema,
    JobPreviewSchema,
    JobSchema,
)
from services.gateway.routing import page_schema
from tests.e2e.api import ApiClient, ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

# The sim runs `sleep N` and `exit N` as such; anything else runs until it is signalled.
FOREVER = "python train.py"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-jobs")) as system:
        yield system


def fits(schema: type[Schema], body: Any) -> Any:
    """The answer loads with the route's answer schema (what the OpenAPI document says)."""
    schema().load(body)
    return body


def one_task(host: str, gpu: int, command: str = FOREVER, **extra: Any) -> dict[str, Any]:
    return {"name": "train", "tasks": [{"host": host, "gpus": [gpu], "command": command}], **extra}


async def create(client: ApiClient, definition: dict[str, Any]) -> dict[str, Any]:
    created = await client.post("/jobs", definition)
    assert created.status == 201, created.body
    return dict(fits(JobSchema, created.body))


async def reach(
    system: ApiSystem, client: ApiClient, job_id: int, *statuses: str
) -> dict[str, Any]:
    async def reached() -> dict[str, Any] | None:
        answer = await client.get(f"/jobs/{job_id}")
        assert answer.status == 200, answer.body
        return dict(answer.body) if answer.body["status"] in statuses else None

    job: dict[str, Any] = await system.until(reached, f"job {job_id} {'/'.join(statuses)}")
    return fits(JobSchema, job)


def is_error(answer: Any, status: int, code: str | None = None) -> None:
    assert answer.status == status, (answer.status, answer.body)
    assert isinstance(answer.body, dict) and set(answer.body) == {"error", "message", "details"}
    if code is not None:
        assert answer.body["error"] == code, answer.body


async def test_anonymous_callers_get_401(system: ApiSystem) -> None:
    nobody = system.anonymous()
    for method, path in (
        ("GET", "/jobs"),
        ("POST", "/jobs"),
        ("POST", "/jobs/preview"),
        ("GET", "/jobs/1"),
        ("POST", "/jobs/1/start"),
        ("GET", "/jobs/1/tasks/0/logs"),
    ):
        answer = await nobody.request(method, path, json={} if method == "POST" else None)
        is_error(answer, 401, "authentication_required")


async def test_a_job_runs_on_a_sim_gpu_is_stopped_and_leaves_its_history(
    system: ApiSystem,
) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    gpu = await system.gpu(0, 0)
    job = await create(alice, one_task(gpu["host"], 0, env={"SECRET": "s3"}))
    job_id = job["id"]
    assert job["owner"] == "alice" and job["status"] == "pending"
    assert job["tasks"][0]["gpus"] == [gpu["uuid"]]  # the index, stored as the uuid
    assert job["tasks"][0]["command"] == FOREVER and job["env"] == {"SECRET": "s3"}

    started = await alice.post(f"/jobs/{job_id}/start")
    assert started.status == 200, started.body
    fits(JobSchema, started.body)
    assert started.body["status"] in ("starting", "running")
    running = await reach(system, alice, job_id, "running")
    assert running["tasks"][0]["status"] == "running"
    assert running["tasks"][0]["pid"]

    logs = await alice.get(f"/jobs/{job_id}/tasks/0/logs")
    assert logs.status == 200, logs.body
    fits(JobLogsSchema, logs.body)
    assert logs.body["session"] == f"warden-{job_id}-0"
    assert logs.body["host"] == gpu["host"]
    assert f"CUDA_VISIBLE_DEVICES={gpu['uuid']}" in logs.body["log"]
    short = await alice.get(f"/jobs/{job_id}/tasks/0/logs", max_bytes=10)
    assert short.status == 200 and len(short.body["log"].encode()) <= 10

    # bob sees the public view, and may change nothing
    public = await bob.get(f"/jobs/{job_id}")
    assert public.status == 200
    fits(JobSchema, public.body)
    assert public.body["status"] == "running"
    assert "env" not in public.body and "command" not in public.body["tasks"][0]
    assert "s3" not in str(public.body)
    listed = await bob.get("/jobs", owner="alice")
    assert listed.status == 200
    fits(page_schema(JobSchema), listed.body)
    assert job_id in [j["id"] for j in listed.body["items"]]
    assert "s3" not in str(listed.body) and FOREVER not in str(listed.body)
    for method, path, body in (
        ("PUT", f"/jobs/{job_id}", one_task(gpu["host"], 0)),
        ("DELETE", f"/jobs/{job_id}", None),
        ("POST", f"/jobs/{job_id}/start", None),
        ("POST", f"/jobs/{job_id}/stop", None),
        ("POST", f"/jobs/{job_id}/enqueue", None),
        ("POST", f"/jobs/{job_id}/dequeue", None),
        ("GET", f"/jobs/{job_id}/tasks/0/logs", None),
        ("GET", f"/jobs/{job_id}/history", None),
    ):
        refused = await bob.request(method, path, json=body)
        is_error(refused, 403, "forbidden")

    # a running job may not be edited, deleted or started again
    busy = await alice.put(f"/jobs/{job_id}", one_task(gpu["host"], 0))
    is_error(busy, 409, "state_conflict")
    is_error(await alice.delete(f"/jobs/{job_id}"), 409, "state_conflict")
    is_error(await alice.post(f"/jobs/{job_id}/start"), 409, "state_conflict")

    stopping = await alice.post(f"/jobs/{job_id}/stop")
    assert stopping.status == 200, stopping.body
    assert stopping.body["status"] in ("stopping", "stopped")
    stopped = await reach(system, alice, job_id, "stopped")
    assert stopped["tasks"][0]["exit_code"] == 130  # SIGINT reached it
    assert stopped["stop_reason"] == "stopped by alice"
    is_error(await alice.post(f"/jobs/{job_id}/stop"), 409, "state_conflict")

    history = await alice.get(f"/jobs/{job_id}/history")
    assert history.status == 200, history.body
    fits(JobHistorySchema, history.body)
    assert [(r["task"], r["run"], r["status"]) for r in history.body["runs"]] == [(0, 1, "stopped")]
    assert history.body["runs"][0]["gpus"] == [gpu["uuid"]]

    # ended: its definition may be replaced, then it is deleted
    replaced = await alice.put(f"/jobs/{job_id}", one_task(gpu["host"], 1, "exit 0", env={}))
    assert replaced.status == 200, replaced.body
    fits(JobSchema, replaced.body)
    assert replaced.body["tasks"][0]["command"] == "exit 0" and replaced.body["env"] == {}
    deleted = await alice.delete(f"/jobs/{job_id}")
    assert deleted.status == 200
    assert fits(JobDeletedSchema, deleted.body) == {"deleted": job_id}
    is_error(await alice.get(f"/jobs/{job_id}"), 404, "not_found")


async def test_an_admin_may_read_and_stop_someone_elses_job(system: ApiSystem) -> None:
    alice, admin = await system.as_user("alice"), await system.as_user("admin")
    gpu = await system.gpu(1, 1)
    job_id = (await create(alice, one_task(gpu["host"], 1)))["id"]
    assert (await alice.post(f"/jobs/{job_id}/start")).status == 200
    await reach(system, alice, job_id, "running")
    whole = await admin.get(f"/jobs/{job_id}")
    assert whole.status == 200 and whole.body["tasks"][0]["command"] == FOREVER
    logs = await admin.get(f"/jobs/{job_id}/tasks/0/logs")
    assert logs.status == 200, logs.body
    stopping = await admin.post(f"/jobs/{job_id}/stop")
    assert stopping.status == 200, stopping.body
    stopped = await reach(system, alice, job_id, "stopped")
    assert stopped["stop_reason"] == "stopped by admin"


async def test_a_job_of_short_tasks_ends_with_their_exit_codes(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    first, second = await system.gpu(1, 2), await system.gpu(1, 0)
    host = first["host"]
    job = await create(
        alice,
        {
            "name": "short",
            "tasks": [
                {"host": host, "gpus": ["2"], "command": "sleep 1"},
                {"host": host, "gpus": [second["uuid"]], "command": "exit 3"},
            ],
        },
    )
    assert [t["gpus"] for t in job["tasks"]] == [[first["uuid"]], [second["uuid"]]]
    assert (await alice.post(f"/jobs/{job['id']}/start")).status == 200
    done = await reach(system, alice, job["id"], "failed")
    assert [t["exit_code"] for t in done["tasks"]] == [0, 3]

    async def both_runs() -> set[tuple[int, str]] | None:
        # Each task's run is written as it ends; the job's status may come first.
        history = await alice.get(f"/jobs/{job['id']}/history")
        runs = {(r["task"], r["status"]) for r in history.body["runs"]}
        return runs if len(runs) == 2 else None

    assert await system.until(both_runs, "both runs in the history") == {
        (0, "succeeded"),
        (1, "failed"),
    }


async def test_preview_renders_the_commands_and_cuda_visible_devices(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    first, second = await system.gpu(0, 2), await system.gpu(0, 3)
    host = first["host"]
    definition = {
        "name": "ddp",
        "template": {"kind": "torchrun", "options": {"style": "env"}},
        "params": [{"name": "--epochs", "value": "9", "separator": "="}],
        "tasks": [
            {"host": host, "gpus": [2], "command": "python train.py"},
            {"host": host, "gpus": [3], "command": "python train.py"},
        ],
    }
    before = (await alice.get("/jobs", limit=500)).body["total"]
    preview = await alice.post("/jobs/preview", definition)
    assert preview.status == 200, preview.body
    fits(JobPreviewSchema, preview.body)
    tasks = preview.body["tasks"]
    assert [t["env"]["CUDA_VISIBLE_DEVICES"] for t in tasks] == [first["uuid"], second["uuid"]]
    assert [t["env"]["RANK"] for t in tasks] == ["0", "1"]
    assert "--epochs=9" in tasks[0]["command"]
    assert (await alice.get("/jobs", limit=500)).body["total"] == before  # nothing saved

    # a queued task that asks for any N GPUs shows where it would go
    anywhere = await alice.post(
        "/jobs/preview",
        {"name": "any", "queued": True, "tasks": [{"command": "x", "gpu_count": 2}]},
    )
    assert anywhere.status == 200, anywhere.body
    assert anywhere.body["tasks"][0]["env"]["CUDA_VISIBLE_DEVICES"] == "<gpu-0>,<gpu-1>"

    for_bob = await alice.post("/jobs/preview", {**definition, "owner": "bob"})
    is_error(for_bob, 403, "forbidden")
    is_error(await alice.post("/jobs/preview", {"name": "x", "tasks": []}), 422)


async def test_a_queued_job_is_dequeued_and_enqueued_again(system: ApiSystem) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    # More GPUs than any host has: it waits in the queue (and says why) until taken out.
    definition = {
        "name": "big",
        "queued": True,
        "max_runtime_s": 600,
        "tasks": [{"command": FOREVER, "gpu_count": 8}],
    }
    job = await create(alice, definition)
    job_id = job["id"]
    assert job["status"] == "queued" and job["queued"] is True
    assert job["tasks"][0]["host"] is None and job["tasks"][0]["gpu_count"] == 8
    waiting = await system.until(
        lambda: _waiting(alice, job_id), "the queued job saying why it waits"
    )
    assert waiting["status"] == "queued"

    is_error(await bob.post(f"/jobs/{job_id}/dequeue"), 403, "forbidden")
    out = await alice.post(f"/jobs/{job_id}/dequeue")
    assert out.status == 200, out.body
    fits(JobSchema, out.body)
    assert out.body["queued"] is False and out.body["status"] == "pending"
    # not placed: it cannot start by hand
    is_error(await alice.post(f"/jobs/{job_id}/start"), 409, "state_conflict")

    back = await alice.post(f"/jobs/{job_id}/enqueue")
    assert back.status == 200, back.body
    assert back.body["queued"] is True and back.body["status"] == "queued"
    queued = await alice.get("/jobs", owner="alice", status="queued")
    assert job_id in [j["id"] for j in queued.body["items"]]

    # stop takes a waiting job out of the queue
    taken = await alice.post(f"/jobs/{job_id}/stop")
    assert taken.status == 200, taken.body
    assert taken.body["queued"] is False
    assert (await alice.delete(f"/jobs/{job_id}")).status == 200

    # gpu_count needs the queue
    unqueued = await alice.post("/jobs", {**definition, "queued": False})
    is_error(unqueued, 400, "invalid_request")
    assert "tasks[0].gpu_count" in unqueued.body["details"]["errors"]


async def _waiting(client: ApiClient, job_id: int) -> dict[str, Any] | None:
    answer = await client.get(f"/jobs/{job_id}")
    return dict(answer.body) if answer.body.get("waiting_reason") else None


async def test_invalid_definitions_are_400_or_422_never_500(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    gpu = await system.gpu(0, 1)
    host = gpu["host"]
    good = one_task(host, 1)
    schema_errors: list[tuple[Any, str]] = [
        ({}, "name"),
        ({"name": "x"}, "tasks"),
        ({"name": "x", "tasks": []}, "tasks"),
        ({**good, "name": 5}, "name"),
        ({**good, "name": ""}, "name"),
        ({**good, "tasks": "everything"}, "tasks"),
        ({**good, "tasks": [{"host": host, "gpus": "0", "command": "x"}]}, "tasks"),
        ({**good, "tasks": [{"host": host, "gpus": [True], "command": "x"}]}, "tasks"),
        ({**good, "tasks": [{"host": host, "gpus": [0]}]}, "tasks"),
        ({**good, "tasks": [{"host": host, "command": "x", "gpu_count": "2"}]}, "tasks"),
        ({**good, "tasks": [{"host": host, "command": "x", "colour": "red"}]}, "tasks"),
        ({**good, "env": {"A": 1}}, "env"),
        ({**good, "priority": 9}, "priority"),
        ({**good, "queued": "maybe"}, "queued"),
        ({**good, "start_at": "tomorrow"}, "start_at"),
        ({**good, "start_at": "2030-01-01T10:00:00"}, "start_at"),  # no offset
        ({**good, "template": {"kind": "mpi"}}, "template"),
        ({**good, "max_runtime_s": 0}, "max_runtime_s"),
        ({**good, "reservation_id": "1"}, "reservation_id"),
        ({**good, "owner": ""}, "owner"),
        ({**good, "handback_signal": "KILL"}, "handback_signal"),
        ({**good, "handback_grace_s": -1}, "handback_grace_s"),
        ({**good, "on_time_limit": "kill"}, "on_time_limit"),
    ]
    for body, field in schema_errors:
        answer = await alice.post("/jobs", body)
        is_error(answer, 422, "validation_failed")
        assert field in answer.body["details"]["errors"], (body, answer.body)
    both = await alice.post(
        "/jobs", {**good, "queued": True, "start_at": "2030-01-01T10:00:00+00:00"}
    )
    is_error(both, 422, "validation_failed")

    # what only the service can tell: unknown hosts and GPUs, a GPU without a host, roles
    for body, field in (
        (one_task("nowhere", 0), "tasks[0].host"),
        (one_task(host, 42), "tasks[0].gpus"),
        (one_task(host, "GPU-nope"), "tasks[0].gpus"),
        ({"name": "x", "tasks": [{"gpus": [0], "command": "x"}]}, "tasks[0].gpus"),
        ({"name": "x", "tasks": [{"command": "x"}]}, "tasks[0].host"),
    ):
        answer = await alice.post("/jobs", body)
        is_error(answer, 400, "invalid_request")
        assert field in answer.body["details"]["errors"], (body, answer.body)

    # not a JSON object, not JSON at all
    is_error(await alice.post("/jobs", [good]), 422, "validation_failed")
    raw = await alice.session.post(
        system.base + "/api/v1/jobs",
        data=b"{not json",
        headers={**alice.headers(), "Content-Type": "application/json"},
    )
    assert raw.status == 400 and (await raw.json())["error"] == "invalid_json"

    # only admins create jobs for someone else
    is_error(await alice.post("/jobs", {**good, "owner": "bob"}), 403, "forbidden")
    admin = await system.as_user("admin")
    for_bob = await create(admin, {**good, "owner": "bob"})
    assert for_bob["owner"] == "bob"

    # an update is checked the same way
    bob = await system.as_user("bob")
    job_id = for_bob["id"]
    is_error(await bob.put(f"/jobs/{job_id}", {"name": "x", "tasks": []}), 422)
    is_error(await bob.put(f"/jobs/{job_id}", {**good, "owner": "alice"}), 422)
    is_error(await bob.put(f"/jobs/{job_id}", one_task("nowhere", 0)), 400, "invalid_request")
    assert (await bob.delete(f"/jobs/{job_id}")).status == 200


async def test_unknown_jobs_are_404_and_bad_paths_or_queries_422(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    for method in ("GET", "PUT", "DELETE"):
        body = one_task("x", 0) if method == "PUT" else None
        answer = await alice.request(method, "/jobs/999999", json=body)
        is_error(answer, 404, "not_found")
    for action in ("start", "stop", "enqueue", "dequeue"):
        is_error(await alice.post(f"/jobs/999999/{action}"), 404, "not_found")
    is_error(await alice.get("/jobs/999999/history"), 404, "not_found")
    is_error(await alice.get("/jobs/999999/tasks/0/logs"), 404, "not_found")
    for path in ("/jobs/0", "/jobs/-1", "/jobs/abc", "/jobs/99999999999", "/jobs/1/tasks/-1/logs"):
        is_error(await alice.get(path), 422, "validation_failed")

    gpu = await system.gpu(1, 3)
    job_id = (await create(alice, one_task(gpu["host"], 3)))["id"]
    # a task that has not run yet, a task that does not exist
    is_error(await alice.get(f"/jobs/{job_id}/tasks/0/logs"), 404, "not_found")
    is_error(await alice.get(f"/jobs/{job_id}/tasks/7/logs"), 404, "not_found")
    for max_bytes in ("0", str((1 << 20) + 1), "lots"):
        answer = await alice.get(f"/jobs/{job_id}/tasks/0/logs", max_bytes=max_bytes)
        is_error(answer, 422, "validation_failed")
    # nothing to stop in a job that never ran
    is_error(await alice.post(f"/jobs/{job_id}/stop"), 409, "state_conflict")
    assert (await alice.delete(f"/jobs/{job_id}")).status == 200


async def test_the_job_list_pages_and_filters(system: ApiSystem) -> None:
    alice, bob = await system.as_user("alice"), await system.as_user("bob")
    gpu = await system.gpu(0, 1)
    ids = [(await create(bob, one_task(gpu["host"], 1)))["id"] for _ in range(3)]
    page = await alice.get("/jobs", owner="bob", limit=2)
    assert page.status == 200, page.body
    fits(page_schema(JobSchema), page.body)
    assert page.body["total"] >= 3 and page.body["limit"] == 2 and page.body["offset"] == 0
    assert [j["id"] for j in page.body["items"]] == sorted(ids, reverse=True)[:2]
    rest = await alice.get("/jobs", owner="bob", limit=2, offset=2)
    assert ids[0] in [j["id"] for j in rest.body["items"]]
    assert all(j["owner"] == "bob" for j in page.body["items"] + rest.body["items"])
    pending = await alice.get("/jobs", owner="bob", status="pending", limit=500)
    assert set(ids) <= {j["id"] for j in pending.body["items"]}
    assert (await alice.get("/jobs", owner="bob", status="running")).body["items"] == []
    for bad in ({"limit": "0"}, {"limit": "501"}, {"offset": "-1"}, {"status": "sleeping"}):
        is_error(await alice.get("/jobs", **bad), 422, "validation_failed")
    for job_id in ids:
        assert (await bob.delete(f"/jobs/{job_id}")).status == 200


async def test_the_openapi_document_shows_the_job_definition(system: ApiSystem) -> None:
    document = await system.anonymous().get("/openapi.json")
    assert document.status == 200
    paths = document.body["paths"]
    assert paths["/api/v1/jobs/{id}/start"]["post"]["x-access"] == "owner"
    assert paths["/api/v1/jobs"]["get"]["x-access"] == "user"
    schemas = document.body["components"]["schemas"]
    body = schemas["JobCreateBody"]["properties"]
    assert {"name", "tasks", "queued", "start_at", "owner"} <= set(body)
    assert "owner" not in schemas["JobDefinitionBody"]["properties"]
    task_ref = body["tasks"]["items"]["$ref"].rsplit("/", 1)[-1]
    assert {"command", "gpus", "gpu_count", "host"} <= set(schemas[task_ref]["properties"])


async def test_tasks_sharing_a_gpu_are_refused_unless_the_job_says_so(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    gpu = await system.gpu(1, 0)
    host = gpu["host"]
    # a torchrun of two nodes on one host, both tasks on its GPU 0 (once by index, once by uuid)
    two = {
        "name": "ddp",
        "template": {"kind": "torchrun", "options": {}},
        "tasks": [
            {"host": host, "gpus": [0], "command": "train.py"},
            {"host": host, "gpus": [gpu["uuid"]], "command": "train.py"},
        ],
    }
    for answer in (await alice.post("/jobs", two), await alice.post("/jobs/preview", two)):
        is_error(answer, 422, "gpus_shared")
        assert f"{host} GPU 0" in answer.body["message"], answer.body
        assert answer.body["details"]["gpus"] == {f"{host} GPU 0": [0, 1]}

    shared = await create(alice, {**two, "shared_gpus": True})
    assert shared["shared_gpus"] is True
    assert [t["gpus"] for t in shared["tasks"]] == [[gpu["uuid"]], [gpu["uuid"]]]
    own = {**two, "tasks": [two["tasks"][0], {**two["tasks"][1], "gpus": [1]}]}
    assert (await create(alice, own))["shared_gpus"] is False
    # taking the permission back is checked like a new definition
    is_error(await alice.put(f"/jobs/{shared['id']}", two), 422, "gpus_shared")
