"""A simulated host of two NVLink quads, through the whole embedded Warden: the monitor reads
its `nvidia-smi topo -m` over SSH, `GET /hosts/{name}` shows the matrix, and "any 4 GPUs"
in the earliest slot takes one quad, before and after the other quad is partly booked."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system

pytestmark = pytest.mark.timeout(240)
HOST = "sim-001"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(
        tmp_path_factory.mktemp("api-topology"),
        hosts=1,
        gpus=8,
        topology="nvlink-quads",
        services=["monitor", "reservations", "gateway"],
    ) as system:
        yield system


def quad(indexes: list[int]) -> set[int]:
    return {index // 4 for index in indexes}


@pytest.mark.asyncio(loop_scope="module")
async def test_the_host_shows_its_matrix_and_any_4_takes_one_quad(system: ApiSystem) -> None:
    alice = await system.as_user("alice")

    async def topology() -> dict[str, Any] | None:
        answer = await alice.get(f"/hosts/{HOST}")
        assert answer.status == 200, answer.body
        found: dict[str, Any] | None = answer.body["topology"]
        return found

    matrix = await system.until(topology, f"the topology of {HOST}")
    rows = {gpu["index"]: gpu for gpu in matrix["gpus"]}
    assert sorted(rows) == list(range(8))
    assert rows[0]["links"] == ["X", "NV4", "NV4", "NV4", "SYS", "SYS", "SYS", "SYS"]
    assert rows[5]["numa_node"] == 1 and rows[5]["cpu_affinity"]

    for index in range(8):  # every GPU known to the reservations service
        await system.gpu(0, index)

    async def slot() -> dict[str, Any] | None:
        # The reservations service hears the topology from the monitor's event.
        answer = await alice.get("/reservations/slot", count=4, duration_minutes=60)
        assert answer.status == 200, answer.body
        body: dict[str, Any] = answer.body
        return body if "NVLink" in (body["why"] or "") else None

    found = await system.until(slot, "a slot on NVLink")
    assert len(quad([gpu["index"] for gpu in found["gpus"]])) == 1
    assert found["why"] == f"4 GPUs joined by NVLink on {HOST}"

    # GPU 1 booked now: the first quad is broken, the second is taken whole.
    gpu = await system.gpu(0, 1)
    made = await alice.post(
        "/reservations",
        {
            "gpus": [gpu["uuid"]],
            "start": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "duration_minutes": 120,
            "title": "one GPU",
        },
    )
    assert made.status == 201, made.body
    again = await alice.get("/reservations/slot", count=4, duration_minutes=60)
    assert again.status == 200, again.body
    assert sorted(g["index"] for g in again.body["gpus"]) == [4, 5, 6, 7]
