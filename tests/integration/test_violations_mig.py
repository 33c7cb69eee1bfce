"""The violations service and a GPU split by MIG, on SQLite and PostgreSQL: the monitor's events
come from a real poll of a simulated host over SSH (its GPU 0 split in two instances), the
reservations from events. A booking of one instance and a squat on another are told apart.

The service and its helpers: tests/integration/test_violations_service.py.
"""

# ruff: noqa: F811 (the imported fixtures `database_url`, `service` are tests' parameters)

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.monitor.readers import SshReader
from services.monitor.state import HostState
from services.shared.remote.ssh import SshHostShell, SshOptions
from services.sim.model import SimFleet
from tests.integration.test_violations_service import (  # noqa: F401 (fixtures)
    Running,
    database_url,
    service,
)
from tests.support.fleet import ServedFleet, served_fleet

HOST = "sim-001"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[ServedFleet]:
    fleet = SimFleet(1, 2, seed=11, churn=False)
    (tmp_path / "fleet").mkdir()
    async with served_fleet(fleet, tmp_path / "fleet") as running:
        yield running


async def poll_into(service: Running, served: ServedFleet, state: HostState) -> None:
    """One poll of the host over SSH; its events published as the monitor publishes them."""
    options = SshOptions(known_hosts=str(served.known_hosts), connect_timeout_s=10.0)
    reader = SshReader(SshHostShell(served.host(HOST), options))
    try:
        reading = await reader.read(20.0)
    finally:
        await reader.close()
    for event_type, data in state.on_reading(reading, datetime.now(UTC)):
        await service.bus.emit(event_type, data, source="monitor")


async def reserve(service: Running, rid: int, owner: str, gpu: dict[str, Any]) -> None:
    start = datetime.now(UTC) - timedelta(minutes=5)
    await service.bus.emit(
        "reservation.created",
        {
            "id": rid,
            "owner": owner,
            "guests": [],
            "gpus": [{"uuid": gpu["uuid"], "host": HOST, "index": gpu["index"]}],
            "start": start.isoformat(),
            "end": (start + timedelta(hours=2)).isoformat(),
            "title": "training",
            "status": "active",
            "created_by": owner,
        },
        source="reservations",
    )


async def test_a_booking_of_one_instance_and_a_squat_on_another_are_told_apart(
    service: Running, served: ServedFleet
) -> None:
    fleet = served.server.fleet
    mig_a, mig_b = fleet.split_gpu(HOST, 0, ["3g.40gb", "3g.40gb"])
    alice = fleet.start_process(HOST, 0, "alice", "python train.py", mig=0)
    bob_on_a = fleet.start_process(HOST, 0, "bob", "python squat.py", mig=0)
    bob_on_b = fleet.start_process(HOST, 0, "bob", "python serve.py", mig=1)
    await reserve(service, 7, "alice", {"uuid": mig_a["uuid"], "index": 1000})
    state = HostState(HOST)
    await poll_into(service, served, state)

    await service.until(lambda: service.of("violation.opened"), "violation.opened")
    (opened,) = service.of("violation.opened")
    assert (opened["offender"], opened["owner"], opened["reservation_id"]) == ("bob", "alice", 7)
    assert opened["pids"] == [bob_on_a]  # not alice's own, not bob's on the other instance
    assert (opened["host"], opened["gpu_index"]) == (HOST, 1000)
    assert alice not in opened["pids"]

    # carol books the other instance: bob's process there is a squat on hers, on its own
    await reserve(service, 8, "carol", {"uuid": mig_b["uuid"], "index": 1001})
    await poll_into(service, served, state)
    await service.until(lambda: len(service.of("violation.opened")) == 2, "the second incident")
    second = service.of("violation.opened")[1]
    assert (second["owner"], second["pids"], second["gpu_index"]) == ("carol", [bob_on_b], 1001)
