"""Group weights in the fair share ([queue] weights), on a whole embedded Warden: a member of a
group that weighs 3 gets three times the share of someone in no weighted group, read from the
accounts' groups by the jobs service."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    config = {"queue": {"weights": ["vision = 3"]}}
    async with running_system(
        tmp_path_factory.mktemp("api-queue-weights"), config=config
    ) as system:
        yield system


async def test_a_weighted_groups_member_has_a_larger_share(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    made = await admin.post("/groups", {"name": "vision", "description": "vision lab"})
    assert made.status == 201, made.body
    joined = await admin.put("/groups/vision/members/bob")
    assert joined.status == 200, joined.body
    for user in ("alice", "bob"):  # jobs no host can hold: they wait, both users are listed
        client = await system.as_user(user)
        created = await client.post(
            "/jobs",
            {"name": "big", "queued": True, "tasks": [{"command": "python x.py", "gpu_count": 16}]},
        )
        assert created.status == 201, created.body

    async def shares() -> dict[str, Any] | None:
        answer = await admin.get("/queue")
        assert answer.status == 200, answer.body
        found = {u["user"]: u["share"] for u in answer.body["users"]}
        return found if found.get("bob") == 0.75 else None

    got = await system.until(shares, "bob's weighted share")
    assert got == {"alice": 0.25, "bob": 0.75}
