"""The reservations service through its RPC methods, on SQLite and PostgreSQL: GPUs answered
with their hardware labels, access rules by label, find-slot by label.

dgx1's GPUs are A100-SXM4-40GB, dgx2's H100 (tests/support/reservations_service.py).
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

import pytest

from services.shared.errors import InvalidRequest, NotAllowed, NotFound
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    Service,
    at,
    book,
    database_url,
    service,
    uuid_of,
)

A100_40GB = ["model=A100", "model=A100-40GB", "memory=40GB", "arch=ampere"]


async def test_gpus_are_answered_with_their_hardware_labels(service: Service) -> None:
    gpus = {g["uuid"]: g for g in await service.call("list_gpus")}
    assert gpus[G0]["labels"] == A100_40GB
    assert "arch=hopper" in gpus[uuid_of("dgx2", 0)]["labels"]


async def test_a100s_only_for_group_vision(service: Service) -> None:
    everyone = (await service.call("list_rules"))[0]
    await service.call("create_group", actor="admin", name="vision")
    await service.call("add_group_member", actor="admin", name="vision", username="alice")
    only = await service.call(
        "create_rule", actor="admin", name="A100s", groups=["vision"], labels=["model=A100"]
    )
    assert only["labels"] == ["model=A100"] and not only["all_gpus"]
    await service.call(
        "update_rule",
        actor="admin",
        id=everyone["id"],
        name=everyone["name"],
        groups=["users"],
        all_gpus=True,
        labels=["model!=A100"],
    )
    listed = {r["id"]: r for r in await service.call("list_rules")}
    assert listed[only["id"]]["labels"] == ["model=A100"]
    assert listed[everyone["id"]]["labels"] == ["model!=A100"]
    await book(service, "alice", [G0], 0, 1)
    with pytest.raises(NotAllowed, match="GPU dgx1:1"):
        await book(service, "bob", [uuid_of("dgx1", 1)], 0, 1)
    await book(service, "bob", [uuid_of("dgx2", 1)], 0, 1)
    with pytest.raises(InvalidRequest, match="the label keys are"):
        await service.call(
            "create_rule", actor="admin", name="bad", groups=["vision"], labels=["gpu=A100"]
        )


async def test_find_slot_keeps_to_the_labels_and_names_the_one_nobody_carries(
    service: Service,
) -> None:
    slot = await service.call(
        "find_slot",
        actor="alice",
        count=3,
        duration_minutes=60,
        not_before=at(0),
        labels=["arch=hopper"],
    )
    assert {g["host"] for g in slot["gpus"]} == {"dgx2"}
    assert all("arch=hopper" in g["labels"] for g in slot["gpus"])
    with pytest.raises(NotFound, match="no GPU labelled model=A100-80GB is offered") as none:
        await service.call(
            "find_slot",
            actor="alice",
            count=1,
            duration_minutes=60,
            labels=["arch=ampere", "model=A100-80GB"],
        )
    assert none.value.details["failed"] == ["model=A100-80GB"]
    with pytest.raises(NotFound, match="no 5 GPUs labelled model=H100 free for you"):
        await service.call(
            "find_slot", actor="alice", count=5, duration_minutes=60, labels=["model=H100"]
        )
    with pytest.raises(InvalidRequest, match="labels"):
        await service.call(
            "find_slot", actor="alice", count=1, duration_minutes=60, labels=["H100"]
        )
