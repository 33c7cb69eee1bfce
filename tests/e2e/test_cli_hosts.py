"""`warden hosts list|add|edit|remove|check` against a whole embedded Warden behind its API: a
host removed and added again under an address known_hosts does not know (its key is new: shown,
then trusted only when the admin says so), its GPUs live again without a restart; only admins
may; without a terminal nothing is changed unless the command line says so."""

from __future__ import annotations

import builtins
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from services.client import hosts as client_hosts
from tests.e2e.api import ApiSystem, running_system
from tests.e2e.test_cli_client import Cli

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("cli-hosts"), hosts=3, gpus=2) as system:
        yield system


@pytest.fixture
def cli(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    return Cli(system, tmp_path, monkeypatch, capsys)


async def _inventory(cli: Cli) -> dict[str, dict[str, Any]]:
    ran = await cli("hosts", "list", "--json")
    assert ran.code == 0, ran
    return {host["name"]: host for host in ran.json()["hosts"]}


async def test_only_admins_may_manage_hosts(cli: Cli) -> None:
    await cli.login("alice")
    ran = await cli("hosts", "list")
    assert ran.code == 1 and "only admins" in ran.err
    ran = await cli("hosts", "remove", cli.system.fleet.hosts[0], "--yes")
    assert ran.code == 1 and "only admins" in ran.err


async def test_a_host_is_removed_and_added_back_with_its_key_accepted(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    system = cli.system
    await cli.login("admin")
    name = system.fleet.hosts[2]
    listed = await cli("hosts", "list")
    assert listed.code == 0 and name in listed.out and "config" in listed.out
    record = (await _inventory(cli))[name]

    # No terminal, no --yes: it says what removing does, and does not.
    kept = await cli("hosts", "remove", name)
    assert kept.code == 1 and "pass --yes" in kept.err
    assert "stops monitoring it now" in kept.out and name in await _inventory(cli)
    # Asked on a terminal, and answered no.
    monkeypatch.setattr(client_hosts, "_interactive", lambda: True)
    monkeypatch.setattr(builtins, "input", lambda _prompt: "n")
    kept = await cli("hosts", "remove", name)
    assert kept.code == 1 and name in await _inventory(cli)
    monkeypatch.setattr(client_hosts, "_interactive", lambda: False)
    removed = await cli("hosts", "remove", name, "--yes")
    assert removed.code == 0 and f"removed {name}" in removed.out
    assert name not in await _inventory(cli)

    # Back under a name known_hosts has no line for: its key is new.
    where = [
        "--address", "localhost", "--port", str(record["port"]), "--user", record["user"],
        "--key-file", record["key_file"], "--label", "lab-b",
    ]  # fmt: skip
    refused = await cli("hosts", "add", name, *where)
    assert refused.code == 1, refused
    fingerprint = _fingerprint(refused.out, name)
    assert f"--accept-host-key {fingerprint}" in refused.err
    assert "(new)" in refused.out and refused.out.count("  GPU ") == 2
    assert name not in await _inventory(cli)

    wrong = await cli("hosts", "add", name, *where, "--accept-host-key", "SHA256:not-it")
    assert wrong.code == 1 and "not trusted" in wrong.err
    assert name not in await _inventory(cli)

    added = await cli("hosts", "add", name, *where, "--accept-host-key", fingerprint)
    assert added.code == 0, added
    host = (await _inventory(cli))[name]
    assert host["address"] == "localhost" and host["labels"] == ["lab-b"]
    assert host["host_key"] and host["source"] == "api"

    admin = await system.as_user("admin")

    async def live() -> bool:
        found = (await admin.get(f"/hosts/{name}")).body
        return bool(found.get("reachable") and len(found.get("gpus", [])) == 2)

    await system.until(live, f"{name} polled again with its GPUs")

    edited = await cli("hosts", "edit", name, "--label", "a100", "--label", "lab-c")
    assert edited.code == 0, edited
    assert (await _inventory(cli))[name]["labels"] == ["a100", "lab-c"]
    nothing = await cli("hosts", "edit", name)
    assert nothing.code == 2

    checked = await cli("hosts", "check", name)
    assert checked.code == 0 and f"{fingerprint} (trusted)" in checked.out
    # The API's answer in words, whether the login writes warnings on terminals included.
    answer = (await admin.post(f"/inventory/hosts/{name}/check", {})).body
    terminals = answer["terminals"]
    writes = "ok" if terminals["ok"] else "NO"
    assert f"terminal warnings: {writes}, {terminals['detail']}" in checked.out


async def test_checking_a_new_key_offers_to_trust_it(
    cli: Cli, monkeypatch: pytest.MonkeyPatch
) -> None:
    await cli.login("admin")
    name = cli.system.fleet.hosts[1]
    record = (await _inventory(cli))[name]
    moved = await cli("hosts", "edit", name, "--address", "localhost")
    assert moved.code == 0, moved
    refused = await cli("hosts", "check", name)
    assert refused.code == 1 and "(new)" in refused.out and "--accept-host-key" in refused.err
    monkeypatch.setattr(client_hosts, "_interactive", lambda: True)
    monkeypatch.setattr(builtins, "input", lambda _prompt: "y")
    trusted = await cli("hosts", "check", name)
    assert trusted.code == 0 and f"trusted the host key of {name}" in trusted.out
    assert (await _inventory(cli))[name]["host_key"]
    assert record["host_key"] is None


def _fingerprint(out: str, name: str) -> str:
    prefix = f"host key of {name}: "
    [line] = [line for line in out.splitlines() if line.startswith(prefix)]
    return line.removeprefix(prefix).split()[0]
