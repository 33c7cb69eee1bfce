"""The simulated fleet's control API (each action, bad input) and `warden sim` (a working config,
`ctl` obeyed), over real SSH and HTTP on free ports.
"""
# ruff: noqa: F811 (the imported fixtures `control`, `sim` are tests' parameters)

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import tomllib
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
import pytest

from services.monitor.probe import PROBE_COMMAND, parse_probe_output, probe_command
from tests.integration.test_sim import (
    DEADLINE_S,
    GPUS,
    HUNG_DEADLINE_S,
    REPO,
    Sim,
    control,  # noqa: F401 (a fixture)
    sections,
    sim,  # noqa: F401 (a fixture)
)
from tests.support.ports import free_port


async def test_control_api_scripts_each_action(
    sim: Sim, control: tuple[str, aiohttp.ClientSession]
) -> None:
    url, http = control

    async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with http.request(method, url + path, json=body) as response:
            return response.status, await response.json()

    status, answer = await call(
        "POST",
        "/hosts/sim-001/processes",
        {"gpu": 1, "user": "carol", "command": "python x.py", "used_memory_mib": 512},
    )
    assert status == 201
    pid = answer["pid"]
    parts = sections(await sim.probe("sim-001"))
    assert parts["apps"][0].startswith(f"{pid}, ") and " carol " in parts["ps"][0]

    status, answer = await call("DELETE", f"/hosts/sim-001/processes/{pid}")
    assert status == 200 and sections(await sim.probe("sim-001"))["apps"] == []

    assert (await call("POST", "/hosts/sim-002/hang", {"seconds": 2.5}))[0] == 200
    assert sim.fleet.hang_s("sim-002") == 2.5
    status, answer = await call("POST", "/hosts/sim-002/hang", {"seconds": "forever"})
    assert status == 200 and answer["hang_s"] == "forever"
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(sim.run("sim-002", "echo ok"), HUNG_DEADLINE_S)
    assert (await call("POST", "/hosts/sim-002/hang", {"seconds": None}))[0] == 200
    assert sim.fleet.hang_s("sim-002") is None

    status, answer = await call("POST", "/hosts/sim-003/down", {"down": True})
    assert status == 200 and answer["down"] is True
    with pytest.raises(ConnectionRefusedError):
        await sim.connect("sim-003")
    assert (await call("POST", "/hosts/sim-003/down", {"down": False}))[0] == 200
    assert (await sim.run("sim-003", "echo ok")).stdout == "ok\n"

    status, answer = await call("POST", "/hosts/sim-001/nvidia-smi", {"mode": "failing"})
    assert status == 200 and answer["nvidia_smi"] == "failing"
    assert sections(await sim.probe("sim-001"))["gpus-rc:arg"] == ["9"]

    status, answer = await call("POST", "/hosts/sim-003/topology", {"shape": "nvlink-quads"})
    assert status == 200 and answer["topology"] == "nvlink-quads"
    reading = parse_probe_output((await sim.run("sim-003", probe_command(True))).stdout)
    assert reading.topology is not None and reading.topology.link(0, 1) == "NV4"

    status, answer = await call("POST", "/hosts/sim-002/gpus/3/remove")
    assert status == 200 and [g["removed"] for g in answer["gpus"]] == [False] * 3 + [True]

    status, fleet = await call("GET", "/fleet")
    assert status == 200 and [h["name"] for h in fleet["hosts"]] == list(sim.fleet.hosts)
    assert [h["port"] for h in fleet["hosts"]] == [sim.server.ports[h] for h in sim.fleet.hosts]
    status, one = await call("GET", "/hosts/sim-003")
    assert status == 200 and one["name"] == "sim-003" and len(one["gpus"]) == GPUS


BAD_REQUESTS = [
    ("POST", "/hosts/nope/processes", {"gpu": 0, "user": "a", "command": "x"}, 404),
    ("POST", "/hosts/sim-001/processes", {"gpu": 9, "user": "a", "command": "x"}, 404),
    ("POST", "/hosts/sim-001/processes", {"gpu": None, "user": "a", "command": "x"}, 400),
    ("POST", "/hosts/sim-001/processes", {"gpu": "0", "user": "a", "command": "x"}, 400),
    ("POST", "/hosts/sim-001/processes", {"gpu": 0, "user": "Bad User", "command": "x"}, 400),
    ("POST", "/hosts/sim-001/processes", {"gpu": 0, "user": "a", "command": ""}, 400),
    ("POST", "/hosts/sim-001/processes", {"gpu": 0, "user": "a", "command": 5}, 400),
    ("POST", "/hosts/sim-001/processes", {"gpu": 0, "user": "a"}, 400),
    (
        "POST",
        "/hosts/sim-001/processes",
        {"gpu": 0, "user": "a", "command": "x", "used_memory_mib": -1},
        400,
    ),
    (
        "POST",
        "/hosts/sim-001/processes",
        {"gpu": 0, "user": "a", "command": "x", "used_memory_mib": "lots"},
        400,
    ),
    ("POST", "/hosts/sim-001/processes", "not json", 400),
    ("POST", "/hosts/sim-001/processes", [1, 2], 400),
    ("DELETE", "/hosts/sim-001/processes/12345", None, 404),
    ("DELETE", "/hosts/sim-001/processes/abc", None, 400),
    ("DELETE", "/hosts/nope/processes/1", None, 404),
    ("POST", "/hosts/sim-001/hang", {}, 400),
    ("POST", "/hosts/sim-001/hang", {"seconds": -1}, 400),
    ("POST", "/hosts/sim-001/hang", {"seconds": "soon"}, 400),
    ("POST", "/hosts/sim-001/hang", {"seconds": [1]}, 400),
    ("POST", "/hosts/sim-001/hang", {"seconds": True}, 400),
    ("POST", "/hosts/nope/hang", {"seconds": 1}, 404),
    ("POST", "/hosts/sim-001/down", {"down": "yes"}, 400),
    ("POST", "/hosts/sim-001/down", {}, 400),
    ("POST", "/hosts/sim-001/down", None, 400),
    ("POST", "/hosts/sim-001/nvidia-smi", {"mode": "broken"}, 400),
    ("POST", "/hosts/sim-001/nvidia-smi", {"mode": ["ok"]}, 400),
    ("POST", "/hosts/sim-001/topology", {"shape": "mesh"}, 400),
    ("POST", "/hosts/sim-001/topology", {}, 400),
    ("POST", "/hosts/nope/topology", {"shape": "pcie"}, 404),
    ("POST", "/hosts/sim-001/gpus/7/remove", None, 404),
    ("POST", "/hosts/sim-001/gpus/x/remove", None, 400),
    ("GET", "/hosts/nope", None, 404),
    ("GET", "/nowhere", None, 404),
    ("PUT", "/fleet", None, 405),
]


@pytest.mark.parametrize(("method", "path", "body", "status"), BAD_REQUESTS)
async def test_control_api_rejects_bad_input(
    sim: Sim,
    control: tuple[str, aiohttp.ClientSession],
    method: str,
    path: str,
    body: Any,
    status: int,
) -> None:
    url, http = control
    data = body if isinstance(body, str) else None
    payload = None if isinstance(body, str) or body is None else body
    async with http.request(method, url + path, json=payload, data=data) as response:
        assert response.status == status
        answer = await response.json()
    assert answer["error"] and answer["message"]
    snapshot = sim.fleet.snapshot("sim-001")["hosts"][0]
    assert snapshot["processes"] == [] and not snapshot["down"]  # nothing half-applied


# -- `warden sim` as a process ------------------------------------------------------------

# `warden`'s own entry point, so its parser's options meet the simulator's (`--command`).
WARDEN_SIM = "import sys; from services.cli import main; sys.exit(main(sys.argv[1:]))"


async def _warden_sim(*args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WARDEN_SIM,
        "sim",
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
    )
    out, err = await asyncio.wait_for(proc.communicate(), DEADLINE_S)
    return proc.returncode or 0, out.decode(), err.decode()


async def test_warden_sim_writes_a_working_config_and_obeys_ctl(tmp_path: Path) -> None:
    control_port = free_port()
    config = tmp_path / "sim" / "hosts.toml"
    server = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        WARDEN_SIM,
        "sim",
        "--hosts",
        "2",
        "--gpus-per-host",
        "2",
        "--no-churn",
        "--control-port",
        str(control_port),
        "--write-config",
        str(config),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert server.stdout is not None
    try:
        printed: list[str] = []
        while not printed or printed[-1] != "Ctrl-C to stop":
            line = await asyncio.wait_for(server.stdout.readline(), DEADLINE_S)
            assert line, "warden sim exited early"
            printed.append(line.decode().rstrip("\n"))
        assert any(str(config) in line for line in printed)
        hosts = tomllib.loads(config.read_text())["hosts"]
        assert [h["name"] for h in hosts] == ["sim-001", "sim-002"]
        known_hosts = config.parent / "known_hosts"
        async with asyncssh.connect(
            hosts[1]["address"],
            hosts[1]["port"],
            username=hosts[1]["user"],
            client_keys=[hosts[1]["key_file"]],
            known_hosts=str(known_hosts),
            config=None,
            agent_path=None,
        ) as conn:
            assert (await conn.run("echo ok")).stdout == "ok\n"
            rc, out, err = await _warden_sim(
                "ctl",
                "start-process",
                "--control-port",
                str(control_port),
                "--host",
                "sim-002",
                "--gpu",
                "1",
                "--user",
                "heidi",
                "--command",
                "python serve.py",
            )
            assert rc == 0, err
            pid = json.loads(out)["pid"]
            parts = sections(str((await conn.run(PROBE_COMMAND)).stdout))
            assert parts["apps"][0].startswith(f"{pid}, ")
            rc, out, err = await _warden_sim(
                "ctl", "stop-process", "--control-port", str(control_port), "--host", "sim-002",
                "--pid", "1",
            )  # fmt: skip
            assert rc == 1 and "no process 1" in err
    finally:
        if server.returncode is None:
            server.send_signal(signal.SIGTERM)
        rc = await asyncio.wait_for(server.wait(), DEADLINE_S)
    assert rc == 0
