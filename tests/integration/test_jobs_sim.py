"""Job tasks on the simulated fleet, through `TaskRunner` over the simulator's real SSH server.

Each test gets its own fleet (2 hosts x 2 GPUs, no background churn) on a clock the test moves,
its own client key and known_hosts. Tasks run as the login user (alice, bob) with Warden's
user key (ssh.key_file); the monitor's probe runs as the management user and must see
each task's GPU process, owned by its login, until the task ends.
"""

from __future__ import annotations

import shlex
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import aiohttp
import pytest

from services.jobs.runner import TaskRunner
from services.jobs.scripts import (
    LOG_MARK,
    RUNNER_SCRIPT,
    SCRIPT_NAME,
    START_SCRIPT,
    Probe,
    Started,
)
from services.monitor.probe import PROBE_COMMAND, HostReading, parse_probe_output
from services.shared.config import HostConfig, Settings
from services.sim.control import ControlApi
from services.sim.model import SimFleet
from services.sim.server import SimServer
from services.violations.actions.remote import SshHostShell
from services.violations.scripts import signal_command
from tests.support.fleet import served_fleet

HOST = "sim-001"
MANAGEMENT_USER = "warden"
T0 = 1795000000.0


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


@dataclass
class Sim:
    fleet: SimFleet
    server: SimServer
    clock: Clock
    runner: TaskRunner
    shell: SshHostShell  # the management user's, for the probe
    host: HostConfig

    async def probe(self) -> HostReading:
        result = await self.shell.run(self.host, MANAGEMENT_USER, PROBE_COMMAND)
        return parse_probe_output(result.stdout)

    async def uuids(self) -> list[str]:
        return [gpu.uuid for gpu in (await self.probe()).gpus]

    async def gpu_processes(self) -> set[tuple[int, str, str, str]]:
        """(pid, GPU uuid, user, command) of each process the probe lists."""
        return {
            (p.pid, p.gpu_uuid, p.user or "", p.command) for p in (await self.probe()).processes
        }

    async def state(self, login: str, *sessions: str) -> dict[str, Probe]:
        return await self.runner.poll(self.host, login, list(sessions))


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    clock = Clock()
    fleet = SimFleet(2, 2, seed=5, churn=False, clock=clock)
    async with served_fleet(fleet, tmp_path) as served:
        ssh = served.ssh_settings(connect_timeout_s=5.0)
        host = served.host(HOST, MANAGEMENT_USER)
        runner = TaskRunner(Settings(ssh=ssh, hosts=(host,)))
        try:
            yield Sim(fleet, served.server, clock, runner, SshHostShell(ssh), host)
        finally:
            await runner.close()


async def test_a_task_runs_on_its_gpus_as_its_owner_until_stopped(sim: Sim) -> None:
    uuids = await sim.uuids()
    env = {"CUDA_VISIBLE_DEVICES": ",".join(uuids), "RANK": "0"}
    command = "python train.py --epochs 3"
    started = await sim.runner.start(sim.host, "alice", "warden-7-0", "", command, env)
    assert started.status == "started" and started.pid is not None
    assert started.started_at == datetime.fromtimestamp(T0, UTC)
    assert await sim.state("alice", "warden-7-0") == {
        "warden-7-0": Probe("running", started.pid, started.started_at)
    }
    processes = await sim.gpu_processes()
    [gpu_pid] = {pid for pid, *_ in processes}
    assert processes == {(gpu_pid, uuid, "alice", command) for uuid in uuids}
    [shown] = sim.fleet.snapshot(HOST)["hosts"][0]["processes"]
    assert (shown["pid"], shown["user"], shown["gpu_uuids"]) == (gpu_pid, "alice", uuids)
    memory = [p.used_memory_mib for p in (await sim.probe()).processes]
    assert all(m is not None and 4000 < m < 60000 for m in memory), memory

    sim.clock.t += 60  # it runs until stopped
    assert (await sim.state("alice", "warden-7-0"))["warden-7-0"].state == "running"
    answer = await sim.runner.signal(sim.host, "alice", "warden-7-0", "INT")
    assert answer == "signalled"
    assert await sim.state("alice", "warden-7-0") == {"warden-7-0": Probe("exited", exit_code=130)}
    assert await sim.gpu_processes() == set()
    assert await sim.runner.signal(sim.host, "alice", "warden-7-0", "KILL") == "gone"

    log = await sim.runner.log_tail(sim.host, "alice", "warden-7-0")
    assert log.splitlines()[0] == f"sim: warden-7-0 started: {command}"
    assert f"CUDA_VISIBLE_DEVICES={env['CUDA_VISIBLE_DEVICES']}" in log
    assert log.endswith("sim: warden-7-0 exited with status 130\n")
    tail = await sim.runner.log_tail(sim.host, "alice", "warden-7-0", 10)
    assert tail == log[-10:]
    [task] = sim.fleet.tasks(HOST)
    assert (task["user"], task["session"], task["state"], task["exit_code"]) == (
        "alice",
        "warden-7-0",
        "exited",
        130,
    )


async def test_sleep_and_exit_end_a_task_by_themselves(sim: Sim) -> None:
    [uuid, _] = await sim.uuids()
    env = {"CUDA_VISIBLE_DEVICES": uuid}
    for session, command in (
        ("warden-8-0", "sleep 30"),
        ("warden-8-1", "echo hi && sleep 10; exit 4"),
        ("warden-8-2", "exit 3"),
    ):
        started = await sim.runner.start(sim.host, "bob", session, "/data", command, env)
        assert started.status == "started"
    states = await sim.state("bob", "warden-8-0", "warden-8-1", "warden-8-2")
    assert [p.state for p in states.values()] == ["running", "running", "exited"]
    assert states["warden-8-2"].exit_code == 3
    assert len({pid for pid, *_ in await sim.gpu_processes()}) == 2
    sim.clock.t += 10
    states = await sim.state("bob", "warden-8-0", "warden-8-1")
    assert [(p.state, p.exit_code) for p in states.values()] == [("running", None), ("exited", 4)]
    assert {command for *_, command in await sim.gpu_processes()} == {"sleep 30"}
    sim.clock.t += 20
    assert (await sim.state("bob", "warden-8-0"))["warden-8-0"] == Probe("exited", exit_code=0)
    assert await sim.gpu_processes() == set()


async def test_sessions_are_per_login_and_a_live_name_exists(sim: Sim) -> None:
    first = await sim.runner.start(sim.host, "alice", "warden-9-0", "", "python a.py", {})
    assert first.status == "started"
    assert await sim.runner.start(sim.host, "alice", "warden-9-0", "", "x", {}) == Started("exists")
    other = await sim.runner.start(sim.host, "bob", "warden-9-0", "", "python b.py", {})
    assert other.status == "started" and other.pid != first.pid
    assert await sim.state("carol", "warden-9-0") == {"warden-9-0": Probe("unknown")}
    assert await sim.runner.signal(sim.host, "carol", "warden-9-0", "KILL") == "gone"
    assert await sim.runner.log_tail(sim.host, "carol", "warden-9-0") == ""
    await sim.runner.signal(sim.host, "alice", "warden-9-0", "TERM")
    assert (await sim.state("alice", "warden-9-0"))["warden-9-0"].exit_code == 143
    again = await sim.runner.start(sim.host, "alice", "warden-9-0", "", "python a.py", {})
    assert again.status == "started" and again.pid not in (first.pid, other.pid)
    assert (await sim.state("bob", "warden-9-0"))["warden-9-0"].state == "running"
    assert await sim.gpu_processes() == set()  # no CUDA_VISIBLE_DEVICES: no GPU


async def test_a_task_of_before_a_restart_is_gone_not_unknown(sim: Sim) -> None:
    """`warden demo` tells a new fleet which tasks ran on the one before it: the jobs service
    then sees them end, as after a reboot, instead of waiting on `unknown` forever."""
    assert await sim.state("alice", "warden-3-0") == {"warden-3-0": Probe("unknown")}
    sim.fleet.task_gone(HOST, "alice", "warden-3-0")
    assert await sim.state("alice", "warden-3-0") == {"warden-3-0": Probe("gone")}
    assert await sim.state("bob", "warden-3-0") == {"warden-3-0": Probe("unknown")}
    assert await sim.runner.signal(sim.host, "alice", "warden-3-0", "TERM") == "gone"
    # a session that runs now is left as it is
    started = await sim.runner.start(sim.host, "alice", "warden-4-0", "", "python a.py", {})
    sim.fleet.task_gone(HOST, "alice", "warden-4-0")
    assert (await sim.state("alice", "warden-4-0"))["warden-4-0"] == Probe(
        "running", started.pid, started.started_at
    )


async def test_ignored_signals_then_kill_leaves_no_exit_status(sim: Sim) -> None:
    uuids = await sim.uuids()
    env = {"CUDA_VISIBLE_DEVICES": uuids[1]}
    command = "trap '' INT TERM; python stubborn.py"
    assert (await sim.runner.start(sim.host, "alice", "warden-3-0", "", command, env)).pid
    for sig in ("INT", "TERM", "0"):
        assert await sim.runner.signal(sim.host, "alice", "warden-3-0", sig) == "signalled"
    assert (await sim.state("alice", "warden-3-0"))["warden-3-0"].state == "running"
    assert len(await sim.gpu_processes()) == 1
    assert await sim.runner.signal(sim.host, "alice", "warden-3-0", "KILL") == "signalled"
    assert await sim.state("alice", "warden-3-0") == {"warden-3-0": Probe("gone")}
    assert await sim.gpu_processes() == set()
    log = await sim.runner.log_tail(sim.host, "alice", "warden-3-0")
    assert log.endswith("sim: warden-3-0 was killed\n")


async def test_killing_the_gpu_process_ends_the_task(sim: Sim) -> None:
    """The violations' SIGNAL on the task's GPU process: its runner writes 143 (or 137)."""
    uuids = await sim.uuids()
    env = {"CUDA_VISIBLE_DEVICES": "1"}  # an index works too
    await sim.runner.start(sim.host, "alice", "warden-4-0", "", "python x.py", env)
    await sim.runner.start(sim.host, "alice", "warden-4-1", "", "python y.py", env)
    by_command = {command: (pid, uuid) for pid, uuid, _, command in await sim.gpu_processes()}
    assert {uuid for _, uuid in by_command.values()} == {uuids[1]}
    readings = {p.pid: p for p in (await sim.probe()).processes}
    pid = by_command["python x.py"][0]
    term = signal_command(pid, "alice", readings[pid].started_at, "TERM")
    assert (await sim.shell.run(sim.host, "alice", term)).stdout == "signalled\n"
    assert (await sim.state("alice", "warden-4-0"))["warden-4-0"].exit_code == 143
    sim.fleet.stop_process(HOST, by_command["python y.py"][0])
    assert (await sim.state("alice", "warden-4-1"))["warden-4-1"].exit_code == 137


async def test_the_sim_checks_the_scripts_arguments(sim: Sim) -> None:
    def start(*args: str) -> str:
        return shlex.join(["sh", "-c", START_SCRIPT, SCRIPT_NAME, *args])

    for args in (
        ("byobu", "warden-1-0", "s", "", "true", RUNNER_SCRIPT),
        ("screen", "warden-01-0", "s", "", "true", RUNNER_SCRIPT),
        ("screen", "warden-1-0", "", "", "true", RUNNER_SCRIPT),
        ("screen", "warden-1-0", "s", "", "", RUNNER_SCRIPT),
        ("screen", "warden-1-0", "s", "", "true", RUNNER_SCRIPT, "1X=2"),
        ("screen", "warden-1-0", "s", "", "true", RUNNER_SCRIPT, "$(x)"),
    ):
        result = await sim.shell.run(sim.host, "alice", start(*args))
        assert (result.stdout, result.exit_status) == ("invalid\n", 2), args
    other_runner = start("screen", "warden-1-0", "s", "", "true", "echo other runner")
    result = await sim.shell.run(sim.host, "alice", other_runner)
    assert result.exit_status == 127
    assert sim.fleet.tasks(HOST) == []


async def test_the_control_api_lists_tasks(sim: Sim) -> None:
    await sim.runner.start(sim.host, "alice", "warden-5-0", "/w", "sleep 5", {"A": "b"})
    async with ControlApi(sim.server) as api, aiohttp.ClientSession() as client:
        async with client.get(f"{api.url}/hosts/{HOST}/tasks") as response:
            assert response.status == 200
            body = await response.json()
        async with client.get(f"{api.url}/hosts/sim-404/tasks") as response:
            assert response.status == 404
    [task] = body["tasks"]
    assert body["host"] == HOST
    assert task["user"] == "alice" and task["session"] == "warden-5-0"
    assert task["state"] == "running" and task["env"] == {"A": "b"} and task["cwd"] == "/w"
    assert task["gpus"] == [] and task["gpu_pid"] is None
    result = await sim.shell.run(
        sim.host,
        "alice",
        shlex.join(["sh", "-c", "x", SCRIPT_NAME]),  # an unknown script
    )
    assert result.exit_status == 127 and LOG_MARK not in result.stdout
