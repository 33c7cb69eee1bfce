"""`SshHostShell` against simulated hosts over real SSH on loopback: a connection opened ahead
of the first command (a monitor's standby connection), and one the host closed while it was
idle, replaced by the next command rather than failing it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from services.shared.remote.ssh import SshHostShell, SshOptions
from services.sim.model import SimFleet
from tests.support.fleet import ServedFleet, served_fleet
from tests.support.polling import until

HOST = "sim-001"


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[ServedFleet]:
    async with served_fleet(SimFleet(1, 1, seed=2, churn=False), tmp_path) as fleet:
        yield fleet


async def test_connect_opens_the_connection_the_commands_then_use(served: ServedFleet) -> None:
    shell = SshHostShell(served.host(HOST), SshOptions(known_hosts=str(served.known_hosts)))
    try:
        assert not shell.connected
        requests = served.server.requests
        await shell.connect(10)
        assert shell.connected and served.server.open_connections(HOST) == 1
        assert served.server.requests == requests  # no command run to open it
        ports = served.server.client_ports(HOST)
        assert (await shell.run("echo ok", 10)).stdout == "ok\n"
        assert served.server.client_ports(HOST) == ports  # the same connection
    finally:
        await shell.close()
    assert not shell.connected


async def test_a_connection_the_host_closed_while_idle_is_opened_again(
    served: ServedFleet,
) -> None:
    shell = SshHostShell(served.host(HOST), SshOptions(known_hosts=str(served.known_hosts)))
    try:
        assert (await shell.run("echo ok", 10)).stdout == "ok\n"
        before = served.server.client_ports(HOST)
        served.fleet.set_down(HOST, True)  # the host drops it (a restart)
        connection = shell._connection
        await until(lambda: connection is not None and connection.is_closed(), "seen closed")
        assert not shell.connected
        served.fleet.set_down(HOST, False)
        await served.server.settled()
        assert (await shell.run("echo ok", 10)).stdout == "ok\n"  # not "connection lost"
        assert served.server.client_ports(HOST) != before
    finally:
        await shell.close()
