"""The simulated fleet's GPU faults, read over real SSH by the monitor's probe and parser."""

from __future__ import annotations

from collections.abc import AsyncIterator

import asyncssh
import pytest

from services.monitor.gpu_health import Signal
from services.monitor.probe import PROBE_COMMAND, GpuStatus, parse_probe_output
from services.sim.model import SimFleet
from services.sim.server import SimServer


@pytest.fixture
async def probe() -> AsyncIterator[tuple[SimFleet, asyncssh.SSHClientConnection]]:
    fleet = SimFleet(1, 4, seed=3, churn=False)
    key = asyncssh.generate_private_key("ssh-ed25519")
    async with SimServer(fleet, authorized_keys=[key.export_public_key().decode()]) as server:
        host = fleet.hosts[0]
        conn = await asyncssh.connect(
            "127.0.0.1",
            server.ports[host],
            username="warden",
            client_keys=[key],
            known_hosts=asyncssh.import_known_hosts("\n".join(server.known_hosts_lines())),
            config=None,
            agent_path=None,
        )
        try:
            yield fleet, conn
        finally:
            conn.close()


async def test_each_fault_reads_as_its_signal_and_heals(
    probe: tuple[SimFleet, asyncssh.SSHClientConnection],
) -> None:
    fleet, conn = probe
    host = fleet.hosts[0]
    reading = parse_probe_output(str((await conn.run(PROBE_COMMAND, check=True)).stdout))
    assert reading.health is not None
    assert [gpu.signals for gpu in reading.health.gpus] == [()] * 4
    for index, fault in enumerate(("ecc", "row_remap_pending", "thermal", "pcie")):
        fleet.set_gpu_fault(host, index, fault)
    reading = parse_probe_output(str((await conn.run(PROBE_COMMAND, check=True)).stdout))
    assert reading.health is not None
    assert [{s for s, _ in gpu.signals} for gpu in reading.health.gpus] == [
        {Signal.ECC_UNCORRECTABLE},
        {Signal.ROW_REMAP_PENDING},
        {Signal.THERMAL_SLOWDOWN},
        {Signal.PCIE_LINK_DEGRADED},
    ]
    for index in range(4):
        fleet.set_gpu_fault(host, index, "ok")
    fleet.set_gpu_fault(host, 2, "lost")
    reading = parse_probe_output(str((await conn.run(PROBE_COMMAND, check=True)).stdout))
    assert reading.gpu_status is GpuStatus.ERROR
    assert [gpu.index for gpu in reading.gpus] == [0, 1, 3]
    assert reading.health is not None and len(reading.health.lost_bus_ids) == 1
