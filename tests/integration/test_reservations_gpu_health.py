"""GPU health in the reservations service, on SQLite and PostgreSQL: the row follows
gpu.health_changed (a late event changes nothing), a failed GPU takes no booking and is left
out of find-slot, a healed GPU is bookable again."""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.shared.errors import NotFound, ValidationFailed
from tests.support.reservations_service import (  # noqa: F401 (fixtures)
    G0,
    G1,
    G2,
    Service,
    at,
    book,
    database_url,
    service,
)

T0 = datetime.now(UTC).replace(microsecond=0)


async def _health(service: Service, uuid: str, state: str, since: datetime, **extra: Any) -> None:
    await service.bus.emit(
        "gpu.health_changed",
        {
            "host": "dgx1",
            "uuid": uuid,
            "index": int(uuid.rsplit("-", 1)[1]),
            "state": state,
            "reason": extra.pop("reason", None if state == "ok" else "row remapping pending"),
            "since": since.isoformat(),
            "previous": extra.pop("previous", None),
        },
        source="monitor",
    )


async def _state(service: Service, uuid: str) -> str:
    gpus = {gpu["uuid"]: gpu for gpu in await service.call("list_gpus")}
    return str(gpus[uuid]["health"])


async def test_a_failed_gpu_takes_no_booking_until_it_heals(service: Service) -> None:
    assert await _state(service, G0) == "ok"
    await _health(service, G0, "failed", T0, previous="ok")

    async def failed() -> bool:
        return await _state(service, G0) == "failed"

    await service.until(failed, "the GPU failing")  # type: ignore[arg-type]
    with pytest.raises(ValidationFailed) as refused:
        await book(service, "alice", [G0], 1, 2)
    (reason,) = refused.value.details["reasons"]
    assert reason["code"] == "gpu_failed" and reason["gpu"] == G0
    assert "row remapping pending" in reason["message"]
    # the other GPUs are bookable, and find-slot never offers the failed one
    await book(service, "alice", [G1], 1, 2)
    slot = await service.call(
        "find_slot", actor="alice", count=1, duration_minutes=60, not_before=at(1), host="dgx1"
    )
    assert G0 not in [gpu["uuid"] for gpu in slot["gpus"]]

    # an older event (replayed, late) changes nothing: handled before the marker that follows
    await _health(service, G0, "ok", T0 - timedelta(minutes=5))
    await _health(service, G2, "degraded", T0, reason="PCIe link x8 of x16")

    async def marked() -> bool:
        return await _state(service, G2) == "degraded"

    await service.until(marked, "the marker")  # type: ignore[arg-type]
    assert await _state(service, G0) == "failed"

    await _health(service, G0, "ok", T0 + timedelta(minutes=10), previous="failed")

    async def healed() -> bool:
        return await _state(service, G0) == "ok"

    await service.until(healed, "the GPU back")  # type: ignore[arg-type]
    await book(service, "bob", [G0], 3, 4)


async def test_find_slot_answers_none_when_only_failed_gpus_match(service: Service) -> None:
    for index in range(4):
        await _health(service, f"GPU-dgx1-{index}", "failed", T0)

    async def all_failed() -> bool:
        return all([await _state(service, f"GPU-dgx1-{i}") == "failed" for i in range(4)])

    await service.until(all_failed, "every GPU of dgx1 failed")  # type: ignore[arg-type]
    with pytest.raises(NotFound):
        await service.call(
            "find_slot", actor="alice", count=1, duration_minutes=60, not_before=at(1), host="dgx1"
        )
