"""The terminal, terminate and kill handlers against the simulated fleet, over real SSH.

Each test gets its own fleet (2 hosts x 2 GPUs, no background churn), its own client key,
known_hosts and control API. The alert's processes come from the monitor's own reading of
the probe (pid, user, start time as `@@time - etimes`), as the violations service gets them.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.monitor.probe import PROBE_COMMAND, parse_probe_output
from services.shared.config import HostConfig, ViolationSettings
from services.sim.control import ControlApi
from services.sim.model import SimFleet
from services.sim.server import SimServer
from services.violations.actions.base import Alert, Process
from services.violations.actions.message import terminal_text
from services.violations.actions.remote import RemoteCommandFailed, SshHostShell
from services.violations.actions.signals import kill, terminate
from services.violations.actions.terminal import notify_terminals
from services.violations.scripts import (
    SignalResult,
    WriteResult,
    parse_signal_result,
    parse_who,
    parse_write_result,
    signal_command,
    who_command,
    write_command,
)
from tests.support.fleet import served_fleet

HOST = "sim-001"
MANAGEMENT_USER = "warden"
GRACE_S = 0.2
DEADLINE_S = 20.0
AS_OFFENDER = ViolationSettings(act_as="offender", terminal_as="act_as", term_grace_s=GRACE_S)
AS_MANAGEMENT = ViolationSettings(act_as="management", terminal_as="act_as", term_grace_s=GRACE_S)
BY_DEFAULT = ViolationSettings(term_grace_s=GRACE_S)  # terminal: the management user, group tty


@dataclass
class Sim:
    fleet: SimFleet
    server: SimServer
    shell: SshHostShell
    host: HostConfig

    async def processes(self) -> dict[int, Process]:
        """The host's processes as the monitor reads them (through the probe, over SSH)."""
        result = await self.shell.run(self.host, MANAGEMENT_USER, PROBE_COMMAND)
        reading = parse_probe_output(result.stdout)
        return {
            p.pid: Process(pid=p.pid, command=p.command, started_at=p.started_at)
            for p in reading.processes
        }

    def running(self) -> set[int]:
        return {p["pid"] for p in self.fleet.snapshot(HOST)["hosts"][0]["processes"]}


@pytest.fixture
async def sim(tmp_path: Path) -> AsyncIterator[Sim]:
    fleet = SimFleet(2, 2, seed=5, churn=False)
    async with served_fleet(fleet, tmp_path) as served:
        ssh = served.ssh_settings(connect_timeout_s=5.0)
        yield Sim(fleet, served.server, SshHostShell(ssh), served.host(HOST, MANAGEMENT_USER))


def make_alert(offender: str, *processes: Process) -> Alert:
    return Alert(
        incident_id="inc-sim",
        host=HOST,
        gpu_uuid="GPU-x",
        gpu_index=0,
        offender=offender,
        processes=processes,
        since=datetime.now(UTC),
        owner="bob",
        reservation_end=datetime.now(UTC),
        step="0s terminal offender",
        next_step="300s terminate",
        next_at=datetime.now(UTC),
    )


# --- terminals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "settings",
    [BY_DEFAULT, AS_OFFENDER, AS_MANAGEMENT],
    ids=["tty-group", "offender", "management"],
)
async def test_notify_writes_to_each_terminal_of_the_offender(
    sim: Sim, settings: ViolationSettings
) -> None:
    first, other, second = (
        sim.fleet.login(HOST, "alice"),
        sim.fleet.login(HOST, "bob"),
        sim.fleet.login(HOST, "alice"),
    )
    assert (first, other, second) == ("pts/0", "pts/1", "pts/2")
    alert = make_alert("alice", Process(pid=123, command="python x.py"))
    outcomes = await notify_terminals(sim.shell, sim.host, alert, settings)
    assert [(o.target, o.ok) for o in outcomes] == [
        ("sim-001:pts/0", True),
        ("sim-001:pts/2", True),
    ]
    assert sim.fleet.tty_messages(HOST, "pts/0") == [terminal_text(alert)]
    assert sim.fleet.tty_messages(HOST, "pts/2") == [terminal_text(alert)]
    assert sim.fleet.tty_messages(HOST, "pts/1") == []
    assert sim.fleet.sessions("sim-002") == []


async def test_who_lists_sessions_in_whos_layout(sim: Sim) -> None:
    sim.fleet.login(HOST, "alice")
    sim.fleet.login(HOST, "a-long-username")
    result = await sim.shell.run(sim.host, "alice", who_command())
    lines = result.stdout.splitlines()
    assert lines[0].startswith("alice    pts/0        ") and lines[0].endswith(")")
    assert lines[1].startswith("a-long-username pts/1        ")
    assert [(s.user, s.tty) for s in parse_who(result.stdout)] == [
        ("alice", "pts/0"),
        ("a-long-username", "pts/1"),
    ]


async def test_notify_without_a_session_and_after_logout(sim: Sim) -> None:
    alert = make_alert("alice", Process(pid=123, command="x"))
    outcomes = await notify_terminals(sim.shell, sim.host, alert, AS_OFFENDER)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("sim-001", False, "no terminal session of alice on sim-001")
    ]
    tty = sim.fleet.login(HOST, "alice")
    sim.fleet.logout(HOST, tty)
    outcomes = await notify_terminals(sim.shell, sim.host, alert, AS_OFFENDER)
    assert outcomes[0].detail == "no terminal session of alice on sim-001"


async def test_write_checks_the_terminal_still_belongs_to_the_user(sim: Sim) -> None:
    tty = sim.fleet.login(HOST, "alice")
    sim.fleet.logout(HOST, tty)
    assert sim.fleet.login(HOST, "bob") == tty  # the terminal went to someone else
    for login, sudo in (("alice", False), (MANAGEMENT_USER, True)):
        result = await sim.shell.run(sim.host, login, write_command(tty, "alice", "hi", sudo))
        assert parse_write_result(result.stdout) == WriteResult("not-owner", "bob")
    # Without sudo, another user's terminal cannot be opened at all.
    result = await sim.shell.run(sim.host, "carol", write_command(tty, "bob", "hi"))
    assert parse_write_result(result.stdout) == WriteResult("failed")
    assert "Permission denied" in result.stderr
    result = await sim.shell.run(sim.host, "alice", write_command("pts/9", "alice", "hi"))
    assert parse_write_result(result.stdout) == WriteResult("gone")
    assert sim.fleet.tty_messages(HOST, tty) == []


async def test_control_characters_never_reach_the_terminal(sim: Sim) -> None:
    tty = sim.fleet.login(HOST, "alice")
    command = write_command(tty, "alice", "\x1b[2Jhello\x07\r\n", sudo=False)
    result = await sim.shell.run(sim.host, "alice", command)
    assert parse_write_result(result.stdout) == WriteResult("written")
    assert sim.fleet.tty_messages(HOST, tty) == ["[2Jhello\r\n"]


# --- terminate and kill -----------------------------------------------------------------------


@pytest.mark.parametrize("settings", [AS_OFFENDER, AS_MANAGEMENT], ids=["offender", "management"])
async def test_terminate_ends_processes_and_kills_one_that_ignores_sigterm(
    sim: Sim, settings: ViolationSettings
) -> None:
    polite = sim.fleet.start_process(HOST, 0, "alice", "python train.py")
    stubborn = sim.fleet.start_process(HOST, 1, "alice", "python stubborn.py", ignore_sigterm=True)
    bystander = sim.fleet.start_process(HOST, 1, "bob", "python mine.py")
    seen = await sim.processes()
    assert all(seen[pid].started_at is not None for pid in (polite, stubborn))
    alert = make_alert("alice", seen[polite], seen[stubborn])
    started = time.monotonic()
    outcomes = await terminate(sim.shell, sim.host, alert, settings)
    assert time.monotonic() - started >= GRACE_S
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        (f"sim-001:pid {polite}", True, "terminated"),
        (f"sim-001:pid {stubborn}", True, "killed after SIGTERM was ignored"),
    ]
    assert sim.running() == {bystander}


async def test_sigterm_alone_leaves_a_process_that_ignores_it(sim: Sim) -> None:
    pid = sim.fleet.start_process(HOST, 0, "alice", "python stubborn.py", ignore_sigterm=True)
    process = (await sim.processes())[pid]
    command = signal_command(pid, "alice", process.started_at, "TERM")
    result = await sim.shell.run(sim.host, "alice", command)
    assert parse_signal_result(result.stdout) == SignalResult("signalled")
    assert sim.running() == {pid}


async def test_kill_at_once_then_already_gone(sim: Sim) -> None:
    pid = sim.fleet.start_process(HOST, [0, 1], "alice", "python ddp.py", ignore_sigterm=True)
    alert = make_alert("alice", (await sim.processes())[pid])
    outcomes = await kill(sim.shell, sim.host, alert, AS_OFFENDER)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        (f"sim-001:pid {pid}", True, "killed")
    ]
    assert sim.running() == set()
    outcomes = await kill(sim.shell, sim.host, alert, AS_MANAGEMENT)
    assert [(o.ok, o.detail) for o in outcomes] == [(True, "already gone")]


async def test_a_reused_pid_is_never_signalled(sim: Sim) -> None:
    pid = sim.fleet.start_process(HOST, 0, "alice", "python train.py")
    alert = make_alert("alice", (await sim.processes())[pid])
    sim.fleet.stop_process(HOST, pid)

    # The kernel gives the pid to bob's new process.
    assert sim.fleet.start_process(HOST, 0, "bob", "python mine.py", pid=pid) == pid
    for handler in (kill, terminate):
        outcomes = await handler(sim.shell, sim.host, alert, AS_MANAGEMENT)
        assert not outcomes[0].ok
        assert outcomes[0].detail.startswith(f"not killed: pid {pid} now belongs to bob (started ")
    assert sim.running() == {pid}
    sim.fleet.stop_process(HOST, pid)

    # Then to another process of alice's, started ten minutes before the one seen.
    earlier = sim.fleet.now() - 600
    sim.fleet.start_process(HOST, 0, "alice", "python other.py", pid=pid, started_at=earlier)
    outcomes = await kill(sim.shell, sim.host, alert, AS_OFFENDER)
    assert not outcomes[0].ok
    assert f"pid {pid} now belongs to another process of alice" in outcomes[0].detail
    assert sim.running() == {pid}

    # A process whose start the monitor could not tell is never signalled either.
    unknown = make_alert("alice", Process(pid=pid, command="python other.py"))
    outcomes = await kill(sim.shell, sim.host, unknown, AS_OFFENDER)
    assert not outcomes[0].ok and "start time of pid" in outcomes[0].detail
    assert sim.running() == {pid}


async def test_without_sudo_only_ones_own_processes_can_be_signalled(sim: Sim) -> None:
    pid = sim.fleet.start_process(HOST, 0, "alice", "python train.py")
    process = (await sim.processes())[pid]
    result = await sim.shell.run(
        sim.host, "bob", signal_command(pid, "alice", process.started_at, "KILL")
    )
    assert parse_signal_result(result.stdout) == SignalResult("failed")
    assert "Operation not permitted" in result.stderr
    assert sim.running() == {pid}


async def test_an_unreachable_host_is_an_outcome_not_a_crash(sim: Sim) -> None:
    sim.fleet.set_down(HOST, True)
    alert = make_alert("alice", Process(pid=99, command="x", started_at=datetime.now(UTC)))
    [outcome] = await notify_terminals(sim.shell, sim.host, alert, AS_OFFENDER)
    assert not outcome.ok and outcome.detail == (
        "sim-001: cannot run a command as alice: connection refused"
    )
    [outcome] = await kill(sim.shell, sim.host, alert, AS_MANAGEMENT)
    assert not outcome.ok and "connection refused" in outcome.detail
    with pytest.raises(RemoteCommandFailed) as raised:
        await sim.shell.run(sim.host, "alice", who_command())
    assert raised.value.details == {
        "host": HOST,
        "login": "alice",
        "reason": "connection refused",
    }


# --- the control API --------------------------------------------------------------------------


@pytest.fixture
async def control(sim: Sim) -> AsyncIterator[tuple[str, aiohttp.ClientSession]]:
    async with (
        ControlApi(sim.server, port=0) as api,
        aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=DEADLINE_S)) as http,
    ):
        yield api.url, http


async def test_control_api_logins_ttys_and_stubborn_processes(
    sim: Sim, control: tuple[str, aiohttp.ClientSession]
) -> None:
    url, http = control

    async def call(method: str, path: str, body: Any = None) -> tuple[int, Any]:
        async with http.request(method, url + path, json=body) as response:
            return response.status, await response.json()

    status, answer = await call("POST", f"/hosts/{HOST}/logins", {"user": "alice"})
    assert status == 201 and answer["tty"] == "pts/0"
    alert = make_alert("alice", Process(pid=1, command="x"))
    await notify_terminals(sim.shell, sim.host, alert, AS_OFFENDER)
    status, answer = await call("GET", f"/hosts/{HOST}/ttys")
    assert status == 200
    assert [(s["tty"], s["user"], s["messages"]) for s in answer["sessions"]] == [
        ("pts/0", "alice", [terminal_text(alert)])
    ]
    status, answer = await call("DELETE", f"/hosts/{HOST}/logins/pts/0")
    assert status == 200 and sim.fleet.sessions(HOST) == []

    status, answer = await call(
        "POST",
        f"/hosts/{HOST}/processes",
        {"gpu": 0, "user": "alice", "command": "python x.py", "ignore_sigterm": True, "pid": 4321},
    )
    assert status == 201 and answer["pid"] == 4321
    [process] = sim.fleet.snapshot(HOST)["hosts"][0]["processes"]
    assert process["ignore_sigterm"] is True and process["pid"] == 4321

    for method, path, body, expected in [
        ("POST", f"/hosts/{HOST}/logins", {"user": "Not A User"}, 400),
        ("POST", f"/hosts/{HOST}/logins", {}, 400),
        ("POST", "/hosts/nope/logins", {"user": "alice"}, 404),
        ("DELETE", f"/hosts/{HOST}/logins/pts/0", None, 404),
        ("GET", "/hosts/nope/ttys", None, 404),
        (
            "POST",
            f"/hosts/{HOST}/processes",
            {"gpu": 0, "user": "a", "command": "x", "ignore_sigterm": "yes"},
            400,
        ),
        (
            "POST",
            f"/hosts/{HOST}/processes",
            {"gpu": 0, "user": "a", "command": "x", "pid": 4321},
            400,
        ),
        (
            "POST",
            f"/hosts/{HOST}/processes",
            {"gpu": 0, "user": "a", "command": "x", "pid": 0},
            400,
        ),
    ]:
        status, answer = await call(method, path, body)
        assert status == expected, (method, path, body, answer)
        assert answer["error"] and answer["message"]


def test_unsupported_scripts_stay_unsupported() -> None:
    fleet = SimFleet(1, 1, seed=1, churn=False)
    for command in (
        "sh -c 'rm -rf /' warden",
        "sh -c 'LC_ALL=C who' notwarden",
        "sudo sh -c 'LC_ALL=C who' warden",  # without -n sudo could prompt: not what Warden runs
        who_command() + " extra",
        "sh -c 'unbalanced",
    ):
        result = fleet.run_command("sim-001", command, fleet.now())
        assert result.exit_status == 127, command
