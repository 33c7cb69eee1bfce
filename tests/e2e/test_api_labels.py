"""GPU labels from the hardware through the API, against the simulated fleet (A100-SXM4-80GB):
the GPUs and hosts show them, an access rule by label decides who may book, find-slot keeps to
labels and names the one no GPU carries, bad selectors are a 422. One embedded system."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180)]

A100_80GB = ["model=A100", "model=A100-80GB", "memory=80GB", "arch=ampere"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("api-labels"), hosts=2, gpus=2) as system:
        yield system


def _later(hours: float) -> str:
    start = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=2)
    return (start + timedelta(hours=hours)).isoformat()


async def test_gpus_and_hosts_show_their_hardware_labels(system: ApiSystem) -> None:
    alice = await system.as_user("alice")

    async def listed() -> dict[str, Any] | None:
        answer = await alice.get("/hosts")
        hosts = answer.body["hosts"]
        if len(hosts) < 2 or any(len(h["gpus"]) < 2 for h in hosts):
            return None
        return dict(answer.body)

    hosts = (await system.until(listed, "every host with its GPUs"))["hosts"]
    for host in hosts:
        assert host["gpu_labels"] == sorted(A100_80GB)
        assert all(gpu["labels"] == A100_80GB for gpu in host["gpus"])
    picked = await alice.get("/gpus", label="arch=ampere")
    assert picked.status == 200 and len(picked.body["gpus"]) == 4
    none = await alice.get("/gpus", label="arch=hopper")
    assert none.status == 200 and none.body["gpus"] == []


async def test_a_rule_by_label_decides_and_find_slot_keeps_to_labels(system: ApiSystem) -> None:
    admin, alice, bob = [await system.as_user(u) for u in ("admin", "alice", "bob")]
    gpu = await system.gpu(0, 0)
    assert (await admin.post("/groups", {"name": "vision"})).status == 201
    assert (await admin.put("/groups/vision/members/alice")).status in (200, 201, 204)
    rules = (await admin.get("/rules")).body
    made = await admin.post(
        "/rules", {"name": "A100-80GB for vision", "groups": ["vision"], "labels": ["model=A100"]}
    )
    assert made.status == 201, made.body
    assert made.body["labels"] == ["model=A100"] and made.body["all_gpus"] is False
    for rule in rules:  # the default rule: every GPU but the A100s
        replaced = await admin.put(
            f"/rules/{rule['id']}", {**_body(rule), "labels": ["model!=A100"]}
        )
        assert replaced.status == 200, replaced.body

    booking = {"gpus": [gpu["uuid"]], "start": _later(0), "end": _later(1), "title": "run"}
    refused = await bob.post("/reservations", booking)
    assert refused.status == 403, refused.body
    assert refused.body["details"]["reasons"][0]["code"] == "not_allowed"
    assert (await alice.post("/reservations", booking)).status == 201

    slot = await alice.get(
        "/reservations/slot", count=2, duration_minutes=60, labels="model=A100-80GB,arch=ampere"
    )
    assert slot.status == 200, slot.body
    assert all(g["labels"] == A100_80GB for g in slot.body["gpus"])
    missing = await alice.get(
        "/reservations/slot", count=1, duration_minutes=60, labels=["arch=hopper"]
    )
    assert missing.status == 404, missing.body
    assert missing.body["message"] == "no GPU labelled arch=hopper is offered"
    bad = await alice.get("/reservations/slot", count=1, duration_minutes=60, labels="gpu=A100")
    assert bad.status == 422, bad.body
    assert "the label keys are" in str(bad.body["details"])
    bad_rule = await admin.post("/rules", {"name": "bad", "groups": ["vision"], "labels": ["x"]})
    assert bad_rule.status == 422, bad_rule.body


def _body(rule: dict[str, Any]) -> dict[str, Any]:
    """A rule as PUT takes it back."""
    keys = ("name", "description", "users", "groups", "all_gpus", "hosts", "gpus", "timezone")
    return {key: rule[key] for key in keys} | {"windows": rule["windows"]}


async def test_a_queued_task_waits_for_gpus_carrying_its_labels(system: ApiSystem) -> None:
    alice = await system.as_user("alice")
    await system.gpu(1, 1)  # every GPU known

    async def waiting_reason(labels: list[str], count: int) -> str:
        task = {"command": "sleep 600", "gpu_count": count, "labels": labels}
        definition = {"name": "labelled", "queued": True, "max_runtime_s": 600, "tasks": [task]}
        created = await alice.post("/jobs", definition)
        assert created.status == 201, created.body
        assert created.body["tasks"][0]["labels"] == labels
        job_id = created.body["id"]

        async def said() -> str | None:
            answer = await alice.get(f"/jobs/{job_id}")
            return answer.body.get("waiting_reason") or None

        reason: str = await system.until(said, "the queued job saying why it waits")
        assert (await alice.post(f"/jobs/{job_id}/stop")).status == 200
        return reason

    # The jobs service knows the sim's GPUs are A100-80GB: only too few of them on one host.
    assert await waiting_reason(["model=A100-80GB"], 3) == (
        "no host has 3 GPUs (labelled model=A100-80GB)"
    )
    assert await waiting_reason(["arch=hopper"], 1) == "no GPU labelled arch=hopper is known"
    unplaced = {"command": "x", "host": "sim-001", "labels": ["arch=ampere"]}
    refused = await alice.post("/jobs", {"name": "x", "queued": True, "tasks": [unplaced]})
    assert refused.status == 400, refused.body
    assert "tasks[0].labels" in refused.body["details"]["errors"]
