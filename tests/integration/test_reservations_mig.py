"""MIG instances in the reservations service, on SQLite and PostgreSQL: each instance is booked
like a GPU, the GPU they split is refused whole (422, naming the instances).

The service and its helpers: tests/support/reservations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

import pytest

from services.shared.errors import ValidationFailed
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    Service,
    book,
    database_url,
    service,
    uuid_of,
)

MIG_A = "MIG-aaaaaaaa-0000-5000-8000-000000000001"
MIG_B = "MIG-bbbbbbbb-0000-5000-8000-000000000002"


async def split(service: Service) -> None:
    """dgx1's GPU 0 split into two 3g.20gb instances, as the monitor announces them."""
    for device, uuid in enumerate((MIG_A, MIG_B)):
        await service.bus.emit(
            "gpu.discovered",
            {
                "host": "dgx1",
                "uuid": uuid,
                "index": 1000 + device,
                "name": "NVIDIA A100-SXM4-40GB MIG 3g.20gb",
                "memory_total_mib": 19968.0,
                "mig_parent_uuid": G0,
            },
            source="monitor",
        )

    async def known() -> bool:
        return {MIG_A, MIG_B} <= {g["uuid"] for g in await service.call("list_gpus")}

    await service.until(known, "the instances arriving")


async def test_instances_are_listed_with_their_gpu(service: Service) -> None:
    await split(service)
    gpus = {g["uuid"]: g for g in await service.call("list_gpus")}
    assert gpus[MIG_A]["mig_parent_uuid"] == G0
    assert gpus[MIG_A]["index"] == 1000
    assert gpus[MIG_A]["name"] == "NVIDIA A100-SXM4-40GB MIG 3g.20gb"
    assert gpus[G0]["mig_parent_uuid"] is None


async def test_each_instance_is_booked_alone_and_the_split_gpu_is_refused_whole(
    service: Service,
) -> None:
    await split(service)
    alices = await book(service, "alice", [MIG_A], 0, 2)
    bobs = await book(service, "bob", [MIG_B], 0, 2)  # the same hours, another instance
    assert [g["uuid"] for g in alices["gpus"]] == [MIG_A]
    assert [g["uuid"] for g in bobs["gpus"]] == [MIG_B]
    with pytest.raises(ValidationFailed) as refused:
        await book(service, "bob", [G0, G1], 3, 4)
    reasons = refused.value.details["reasons"]
    assert [r["code"] for r in reasons] == ["mig_split"]
    assert reasons[0]["instances"] == [MIG_A, MIG_B]
    assert "dgx1:0/mig0, dgx1:0/mig1" in reasons[0]["message"]
    await book(service, "bob", [G1], 3, 4)  # a whole GPU that is not split: as before


async def test_a_gpu_is_bookable_whole_again_once_its_instances_are_gone(
    service: Service,
) -> None:
    await split(service)
    for uuid in (MIG_A, MIG_B):
        await service.bus.emit(
            "gpu.disappeared",
            {"host": "dgx1", "uuid": uuid, "index": None, "at": "2099-01-01T00:00:00+00:00"},
            source="monitor",
        )

    async def gone() -> bool:
        gpus = {g["uuid"]: g for g in await service.call("list_gpus")}
        return not gpus[MIG_A]["present"] and not gpus[MIG_B]["present"]

    await service.until(gone, "the instances leaving")
    await book(service, "alice", [G0], 0, 1)


async def test_the_earliest_slot_offers_instances_not_the_split_gpu(service: Service) -> None:
    await split(service)
    slot = await service.call(
        "find_slot", actor="alice", count=5, duration_minutes=60, host="dgx1", same_host=True
    )
    # dgx1's 4 GPUs, one split in two: 3 whole GPUs and the 2 instances, never GPU 0 whole
    assert {g["uuid"] for g in slot["gpus"]} == {
        G1,
        uuid_of("dgx1", 2),
        uuid_of("dgx1", 3),
        MIG_A,
        MIG_B,
    }
