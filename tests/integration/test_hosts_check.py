"""`warden hosts check` (check_hosts and the CLI) against a real sshd and simulated hosts.

The real sshd (tests/support/sshd.py) answers for the cases a real OpenSSH server decides: login,
refused key, and a working `nvidia-smi -L` (the fake one in tests/fixtures/bin). The simulated
fleet (SimServer) answers for what a host's nvidia-smi does wrong, and for a host that hangs.
The CLI runs in a worker thread (it calls asyncio.run) while the servers keep serving here.
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import os
import subprocess
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest

from services import cli
from services.monitor.check import CheckResult, check_hosts
from services.monitor.hosts.host_check import check_host
from services.monitor.hosts.inventory import normal_key_line
from services.shared.config import HostConfig
from services.shared.remote.ssh import SshOptions
from services.sim.model import NVIDIA_SMI_FAILED, SimFleet
from services.sim.server import SimServer
from tests.support.config import write_config
from tests.support.ports import free_port
from tests.support.sshd import Sshd, generate_key
from tests.support.unix_user import throwaway_user

GPUS_CSV = "".join(
    f"GPU-cccccccc-0000-4000-8000-00000000000{i}, {i}, NVIDIA H100 80GB HBM3, 10, 5, 100, "
    f"81559, 40, 120.00, 700.00, [N/A], 1980, 2619\n"
    for i in range(3)
)
SIM_GPUS = 2
TIMEOUT_S = 10.0
HUNG_TIMEOUT_S = 0.5


@dataclass
class Fleet:
    """The real sshd, a simulated fleet, one client key both accept, one known_hosts file."""

    sshd: Sshd
    sim: SimFleet
    server: SimServer
    known_hosts: Path
    tmp: Path

    def sim_host(self, name: str) -> HostConfig:
        (entry,) = (
            h
            for h in self.server.hosts_config(self.sshd.user, self.sshd.client_key)
            if h["name"] == name
        )
        return HostConfig(**entry)

    def options(self) -> SshOptions:
        return SshOptions(known_hosts=str(self.known_hosts), connect_timeout_s=TIMEOUT_S)


@pytest.fixture
async def fleet(sshd: Sshd, tmp_path: Path) -> AsyncIterator[Fleet]:
    sshd.fake_smi("gpus.csv", GPUS_CSV)
    # sim-001: nvidia-smi missing, sim-002: failing, sim-003: hangs, sim-004: healthy,
    # sim-005: healthy but its key is not in known_hosts.
    sim = SimFleet(5, SIM_GPUS, seed=3, churn=False)
    sim.set_nvidia_smi("sim-001", "missing")
    sim.set_nvidia_smi("sim-002", "failing")
    sim.set_hang("sim-003", math.inf)
    async with SimServer(sim, authorized_keys=[sshd.client_public_key]) as server:
        known_hosts = tmp_path / "known_hosts"
        lines = [sshd.known_hosts_line]
        lines += [
            line
            for line in server.known_hosts_lines()
            if not line.startswith(f"[127.0.0.1]:{server.ports['sim-005']} ")
        ]
        known_hosts.write_text("\n".join(lines) + "\n")
        yield Fleet(sshd, sim, server, known_hosts, tmp_path)


def by_name(results: Sequence[CheckResult]) -> dict[str, CheckResult]:
    return {result.name: result for result in results}


# -- check_hosts ------------------------------------------------------------------------------


async def test_a_healthy_host_reports_its_gpu_count(fleet: Fleet) -> None:
    hosts = [fleet.sshd.host_config("real"), fleet.sim_host("sim-004")]
    results = by_name(await check_hosts(hosts, fleet.options(), TIMEOUT_S))
    real = results["real"]
    assert (real.ok, real.gpus, real.detail) == (True, 3, "ok")
    assert real.address == f"127.0.0.1:{fleet.sshd.port}"
    assert (results["sim-004"].ok, results["sim-004"].gpus) == (True, SIM_GPUS)


async def test_a_host_without_gpus_is_ok_but_says_so(fleet: Fleet) -> None:
    fleet.sshd.fake_smi("gpus.csv", None)
    (result,) = await check_hosts([fleet.sshd.host_config()], fleet.options(), TIMEOUT_S)
    assert (result.ok, result.gpus, result.detail) == (True, 0, "ok, but no GPU")


async def test_each_failure_gets_the_reason_a_person_can_act_on(fleet: Fleet) -> None:
    wrong_key = fleet.tmp / "not_authorized"
    generate_key(wrong_key)
    hosts = [
        fleet.sshd.host_config("wrong-key", key_file=str(wrong_key)),
        HostConfig("closed", "127.0.0.1", free_port(), fleet.sshd.user, str(fleet.sshd.client_key)),
        fleet.sim_host("sim-005"),  # key not in known_hosts
        fleet.sim_host("sim-001"),
        fleet.sim_host("sim-002"),
    ]
    results = by_name(await check_hosts(hosts, fleet.options(), TIMEOUT_S))
    assert not any(result.ok for result in results.values())
    assert all(result.gpus is None for result in results.values())
    assert results["wrong-key"].detail.startswith("authentication refused")
    assert results["closed"].detail == "connection refused"
    assert results["sim-005"].detail.startswith("host key not verified")
    assert results["sim-001"].detail == "no nvidia-smi on the host's PATH"
    first_line = NVIDIA_SMI_FAILED.splitlines()[0]
    assert results["sim-002"].detail == f"nvidia-smi failed: {first_line}"


async def test_nvidia_smi_failing_on_the_real_sshd_shows_its_message(fleet: Fleet) -> None:
    fleet.sshd.fake_smi("gpus.csv", None)
    fleet.sshd.fake_smi("gpus.err", "No devices were found\n")
    fleet.sshd.fake_smi("gpus.rc", "6\n")
    (result,) = await check_hosts([fleet.sshd.host_config()], fleet.options(), TIMEOUT_S)
    assert (result.ok, result.detail) == (False, "nvidia-smi failed: No devices were found")


async def test_a_hung_host_times_out(fleet: Fleet) -> None:
    (result,) = await check_hosts([fleet.sim_host("sim-003")], fleet.options(), HUNG_TIMEOUT_S)
    assert (result.ok, result.gpus, result.detail) == (False, None, "timed out")


# -- the CLI --------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def keep_logging() -> Iterator[None]:
    """The CLI configures the root logger; put it back for the tests that follow."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in ("asyncssh", "aiohttp.access")}
    yield
    root.handlers[:] = handlers
    root.setLevel(level)
    for name, old in noisy.items():
        logging.getLogger(name).setLevel(old)


def hosts_config(tmp: Path, hosts: Sequence[HostConfig], known_hosts: Path) -> Path:
    entries = [
        {key: getattr(host, key) for key in ("name", "address", "port", "user", "key_file")}
        for host in hosts
    ]
    return write_config(tmp / "warden.toml", ssh={"known_hosts": str(known_hosts)}, hosts=entries)


async def run_cli(config: Path, *args: str) -> int:
    return await asyncio.to_thread(cli.main, ["hosts", "check", "--config", str(config), *args])


def table_rows(out: str) -> dict[str, list[str]]:
    lines = out.strip().splitlines()
    assert lines[0].split()[:5] == ["HOST", "ADDRESS", "STATUS", "GPUS", "DETAIL"]
    return {line.split()[0]: line.split(None, 4) for line in lines[1:]}


async def test_cli_exits_0_when_every_host_is_ok(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    hosts = [fleet.sshd.host_config("real"), fleet.sim_host("sim-004")]
    config = hosts_config(fleet.tmp, hosts, fleet.known_hosts)
    assert await run_cli(config) == 0
    rows = table_rows(capsys.readouterr().out)
    assert set(rows) == {"real", "sim-004"}
    assert rows["real"][1:] == [f"127.0.0.1:{fleet.sshd.port}", "ok", "3", "ok"]
    assert rows["sim-004"][2:4] == ["ok", str(SIM_GPUS)]


async def test_cli_exits_1_and_prints_one_row_per_host_when_any_fails(
    fleet: Fleet, capsys: pytest.CaptureFixture[str]
) -> None:
    wrong_key = fleet.tmp / "not_authorized"
    generate_key(wrong_key)
    hosts = [
        fleet.sshd.host_config("real"),
        fleet.sshd.host_config("wrong-key", key_file=str(wrong_key)),
        HostConfig("closed", "127.0.0.1", free_port(), fleet.sshd.user, str(fleet.sshd.client_key)),
        fleet.sim_host("sim-001"),
        fleet.sim_host("sim-002"),
        fleet.sim_host("sim-003"),
        fleet.sim_host("sim-005"),
    ]
    config = hosts_config(fleet.tmp, hosts, fleet.known_hosts)
    assert await run_cli(config, "--timeout", "2") == 1
    rows = table_rows(capsys.readouterr().out)
    assert list(rows) == [host.name for host in hosts]  # one row each, in the config's order
    assert rows["real"][2:] == ["ok", "3", "ok"]
    for name in ("wrong-key", "closed", "sim-001", "sim-002", "sim-003", "sim-005"):
        assert rows[name][2:4] == ["FAILED", "-"], rows[name]
    assert rows["wrong-key"][4].startswith("authentication refused")
    assert rows["closed"][4] == "connection refused"
    assert rows["sim-001"][4] == "no nvidia-smi on the host's PATH"
    assert rows["sim-002"][4].startswith("nvidia-smi failed: NVIDIA-SMI has failed")
    assert rows["sim-003"][4] == "timed out"
    assert rows["sim-005"][4].startswith("host key not verified")


async def test_cli_without_hosts_exits_1_and_says_what_to_add(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = hosts_config(tmp_path, [], tmp_path / "known_hosts")
    assert await run_cli(config) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    assert "no hosts to check" in captured.err and "[[hosts]]" in captured.err


# -- check_host (CHECK_HOST): the host key before it is trusted ---------------------------------


async def test_the_real_sshd_key_is_shown_as_ssh_keygen_does_new_trusted_or_changed(
    fleet: Fleet,
) -> None:
    real = fleet.sshd.host_config("real")
    empty = fleet.tmp / "empty_known_hosts"
    empty.write_text("")
    unknown = SshOptions(known_hosts=str(empty), connect_timeout_s=TIMEOUT_S)

    new = await check_host(real, unknown, TIMEOUT_S)
    assert new["ok"] and new["host_key"]["status"] == "new"
    assert len(new["gpus"]) == 3 and new["gpus"][0]["uuid"].startswith("GPU-cccccccc")
    assert new["host_key"]["line"] == normal_key_line(fleet.sshd.known_hosts_line)
    # The fingerprint as OpenSSH prints it for the host's own public key file.
    keygen = await asyncio.to_thread(
        subprocess.run,
        ["ssh-keygen", "-lf", f"{fleet.sshd.host_key}.pub"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert keygen.stdout.split()[1] == new["host_key"]["fingerprint"]

    trusted = await check_host(real, fleet.options(), TIMEOUT_S)
    assert trusted["ok"] and trusted["host_key"]["status"] == "trusted"
    accepted = dataclasses.replace(real, host_key=new["host_key"]["line"])
    pinned = await check_host(accepted, unknown, TIMEOUT_S)
    assert pinned["ok"] and pinned["host_key"]["status"] == "trusted"

    other = generate_key(fleet.tmp / "other_host_key")
    wrong = dataclasses.replace(real, host_key=other)
    changed = await check_host(wrong, unknown, TIMEOUT_S)
    assert not changed["ok"] and changed["host_key"]["status"] == "changed"
    assert changed["host_key"]["fingerprint"] == new["host_key"]["fingerprint"]
    assert changed["gpus"] == [] and "not logging in" in changed["detail"]


@pytest.mark.skipif(os.geteuid() != 0, reason="creating a Unix user for the login needs root")
async def test_the_check_says_whether_the_login_writes_on_terminals(fleet: Fleet) -> None:
    """The terminal warning is written by the host's login as a member of group tty: the check
    of the real sshd says so for a login in it, and how to fix one that is not."""
    with throwaway_user() as user:
        host = fleet.sshd.host_config("real", user=user.name)
        refused = await check_host(host, fleet.options(), TIMEOUT_S)
        assert refused["ok"] and refused["terminals"]["ok"] is False
        assert f"sudo usermod -aG tty {user.name}" in refused["terminals"]["detail"]
        await asyncio.to_thread(
            subprocess.run, ["usermod", "-aG", "tty", user.name], check=True, timeout=30
        )
        allowed = await check_host(host, fleet.options(), TIMEOUT_S)
        assert allowed["terminals"] == {
            "ok": True,
            "detail": f"{user.name} is in group tty: it writes warnings on terminals",
        }
    simulated = await check_host(fleet.sim_host("sim-004"), fleet.options(), TIMEOUT_S)
    assert simulated["terminals"] is not None
