"""`TaskRunner` with a fake shell: the commands it builds, one connection per login, what it says
when a host or a login fails; and the public key users add for Warden's logins.
"""

from __future__ import annotations

import asyncio
import shlex
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import asyncssh
import pytest

from services.jobs.runner import TaskRemoteFailed, TaskRunner
from services.jobs.scripts import (
    LOG_MARK,
    LOG_SCRIPT,
    SIGNAL_SCRIPT,
    START_SCRIPT,
    STATUS_SCRIPT,
    Probe,
    Started,
    log_command,
    signal_command,
    start_command,
    status_command,
)
from services.shared.config import HostConfig, JobSettings, Settings, SshSettings
from services.shared.errors import ConfigError
from services.shared.remote import ssh as fleet
from services.shared.remote.ssh import CommandResult, public_key_line
from tests.unit.test_jobs_runner import (
    HOST,
    NOISE,
    T0,
)

# --- TaskRunner with a fake shell ---------------------------------------------------------------


class Shells:
    """A shell factory that answers through `answer` and records each shell it made."""

    def __init__(self, answer: Callable[[str], CommandResult]) -> None:
        self.answer = answer
        self.made: list[tuple[HostConfig, fleet.FakeHostShell]] = []

    def __call__(self, target: HostConfig) -> fleet.HostShell:
        shell = fleet.FakeHostShell(target.name, self.answer)
        self.made.append((target, shell))
        return shell

    @property
    def commands(self) -> list[str]:
        return [command for _, shell in self.made for command in shell.commands]


def make_settings(ssh_key_file: str = "", **jobs: object) -> Settings:
    return Settings(
        ssh=SshSettings(key_file=ssh_key_file),
        jobs=JobSettings(**jobs),  # type: ignore[arg-type]
        hosts=(HOST,),
    )


async def test_runner_builds_each_command_and_reuses_one_connection_per_login() -> None:
    answers = {
        "start": CommandResult(0, NOISE + "started 42 1795000000\n"),
        "status": CommandResult(0, "warden-7-0 running 42 1795000000\nwarden-7-1 gone\nok\n"),
        "signal": CommandResult(0, "signalled\n"),
        "log": CommandResult(0, f"{LOG_MARK} begin\nhello\n\n{LOG_MARK} ok 6\n"),
    }

    def answer(command: str) -> CommandResult:
        script = shlex.split(command)[2]
        for name, constant in (
            ("start", START_SCRIPT),
            ("status", STATUS_SCRIPT),
            ("signal", SIGNAL_SCRIPT),
            ("log", LOG_SCRIPT),
        ):
            if script == constant:
                return answers[name]
        raise AssertionError(command)

    shells = Shells(answer)
    settings = make_settings(multiplexer="tmux", ssh_key_file="/keys/users", state_dir="st")
    runner = TaskRunner(settings, shells=shells)
    env = {"CUDA_VISIBLE_DEVICES": "GPU-1"}
    started = await runner.start(HOST, "alice", "warden-7-0", "/w", "python t.py", env)
    assert started == Started("started", 42, datetime.fromtimestamp(T0, UTC))
    probes = await runner.poll(HOST, "alice", ["warden-7-1", "warden-7-0"])
    assert list(probes) == ["warden-7-1", "warden-7-0"]
    assert probes["warden-7-1"] == Probe("gone")
    assert await runner.signal(HOST, "alice", "warden-7-0", "INT") == "signalled"
    assert await runner.log_tail(HOST, "alice", "warden-7-0", 100) == "hello\n"
    assert await runner.poll(HOST, "alice", []) == {}
    await runner.signal(HOST, "warden", "warden-7-0", "0")
    assert shells.commands == [
        start_command("tmux", "warden-7-0", "st", "/w", "python t.py", env),
        status_command("st", ["warden-7-1", "warden-7-0"]),
        signal_command("st", "warden-7-0", "INT"),
        log_command("st", "warden-7-0", 100),
        signal_command("st", "warden-7-0", "0"),
    ]
    # One shell per (host, login): the user's key for alice, the host's for its own user.
    assert [(t.user, t.key_file, t.address) for t, _ in shells.made] == [
        ("alice", "/keys/users", "10.0.0.1"),
        ("warden", "/keys/host", "10.0.0.1"),
    ]
    await runner.close()
    assert [shell.closed for _, shell in shells.made] == [1, 1]


async def test_runner_uses_the_hosts_key_without_a_user_key() -> None:
    shells = Shells(lambda _command: CommandResult(0, "signalled\n"))
    runner = TaskRunner(make_settings(), shells=shells)
    await runner.signal(HOST, "bob", "warden-1-0", "0")
    assert [(t.user, t.key_file) for t, _ in shells.made] == [("bob", "/keys/host")]


async def test_runner_closes_idle_connections_and_reconnects_on_changed_settings() -> None:
    now = [0.0]
    shells = Shells(lambda _command: CommandResult(0, "gone\n"))
    runner = TaskRunner(make_settings(), shells=shells, idle_close_s=60, clock=lambda: now[0])
    await runner.signal(HOST, "bob", "warden-1-0", "0")
    await runner.signal(HOST, "carol", "warden-1-0", "0")
    now[0] = 30.0
    await runner.signal(HOST, "bob", "warden-1-0", "0")
    now[0] = 70.0  # carol's idle for 70 s, bob's for 40 s
    await runner.signal(HOST, "bob", "warden-1-0", "0")
    assert [(t.user, s.closed) for t, s in shells.made] == [("bob", 0), ("carol", 1)]
    moved = HostConfig(name="dgx1", address="10.0.0.2", user="warden", key_file="/keys/host")
    await runner.signal(moved, "bob", "warden-1-0", "0")
    assert [(t.user, t.address, s.closed) for t, s in shells.made] == [
        ("bob", "10.0.0.1", 1),
        ("carol", "10.0.0.1", 1),
        ("bob", "10.0.0.2", 0),
    ]


async def test_runner_says_what_to_do_when_the_login_is_refused() -> None:
    def refuse(_command: str) -> CommandResult:
        try:
            raise asyncssh.PermissionDenied("denied")
        except asyncssh.PermissionDenied as err:
            raise fleet.HostUnreachable(
                "dgx1: authentication refused", {"reason": fleet.describe_ssh_error(err)}
            ) from err

    runner = TaskRunner(make_settings(), shells=Shells(refuse))
    with pytest.raises(TaskRemoteFailed) as caught:
        await runner.start(HOST, "alice", "warden-1-0", "", "true", {})
    assert caught.value.message == (
        "dgx1: cannot log in as alice: authentication refused "
        "(add `warden key` to ~alice/.ssh/authorized_keys)"
    )
    assert caught.value.details["login"] == "alice"
    assert isinstance(caught.value, fleet.HostUnreachable)
    assert caught.value.to_dict()["code"] == "task_remote_failed"


async def test_runner_reports_an_unreachable_host() -> None:
    def down(_command: str) -> CommandResult:
        raise fleet.HostUnreachable("dgx1: timed out", {"host": "dgx1", "reason": "timed out"})

    runner = TaskRunner(make_settings(), shells=Shells(down))
    with pytest.raises(TaskRemoteFailed, match="dgx1: cannot run a command as bob: timed out"):
        await runner.poll(HOST, "bob", ["warden-1-0"])


@pytest.mark.parametrize(
    ("call", "answer"),
    [
        ("start", CommandResult(127, "", "sh: 1: screen: not found\n")),
        ("start", CommandResult(1, "This account is currently not available.\n")),
        ("poll", CommandResult(0, "warden-1-0 gone\nok\n")),  # warden-1-1 left out
        ("poll", CommandResult(0, "warden-1-0 gone\nwarden-1-1 gone\n")),  # cut short
        ("signal", CommandResult(2, "invalid\n")),
        ("signal", CommandResult(0, "")),
        ("log", CommandResult(0, "motd\n")),
    ],
)
async def test_runner_raises_on_answers_that_make_no_sense(
    call: str, answer: CommandResult
) -> None:
    runner = TaskRunner(make_settings(), shells=Shells(lambda _command: answer))
    with pytest.raises(TaskRemoteFailed) as caught:
        if call == "start":
            await runner.start(HOST, "bob", "warden-1-0", "", "true", {})
        elif call == "poll":
            await runner.poll(HOST, "bob", ["warden-1-0", "warden-1-1"])
        elif call == "signal":
            await runner.signal(HOST, "bob", "warden-1-0", "INT")
        else:
            await runner.log_tail(HOST, "bob", "warden-1-0")
    message = caught.value.message
    assert message.startswith("dgx1: ") and "gave no answer" in message, message
    assert f"exit status {answer.exit_status}" in message


async def test_runner_refuses_bad_values_before_connecting() -> None:
    shells = Shells(lambda _command: CommandResult(0, "signalled\n"))
    runner = TaskRunner(make_settings(), shells=shells)
    with pytest.raises(ValueError):
        await runner.signal(HOST, "bob", "warden-1-0", "HUP")
    with pytest.raises(ValueError):
        await runner.start(HOST, "bob", "warden-1-0", "", "true", {"BAD-NAME": "x"})
    with pytest.raises(ValueError):
        await runner.signal(HOST, "", "warden-1-0", "INT")
    assert shells.commands == []


async def test_runner_runs_commands_concurrently_on_one_shell() -> None:
    gate = asyncio.Event()

    class SlowShell(fleet.FakeHostShell):
        async def run(self, command: str, timeout: float) -> CommandResult:
            self.commands.append(command)
            await gate.wait()
            return CommandResult(0, "gone\n")

    made: list[SlowShell] = []

    def factory(target: HostConfig) -> fleet.HostShell:
        made.append(SlowShell(target.name, lambda _c: CommandResult(0, "")))
        return made[-1]

    runner = TaskRunner(make_settings(), shells=factory, idle_close_s=0)
    calls = [runner.signal(HOST, "bob", f"warden-1-{i}", "0") for i in range(3)]
    pending = asyncio.gather(*calls)
    await asyncio.sleep(0.01)
    gate.set()
    assert await pending == ["gone"] * 3
    assert len(made) == 1 and len(made[0].commands) == 3
    assert made[0].closed == 0  # never closed while busy


# --- the public key -----------------------------------------------------------------------------


def test_public_key_line_reads_the_pub_file_or_derives_it(tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519", comment="warden@test")
    private = tmp_path / "warden_ed25519"
    private.write_bytes(key.export_private_key())
    expected = key.export_public_key("openssh").decode().strip()
    settings = make_settings(ssh_key_file=str(private))
    assert public_key_line(settings) == expected  # no .pub: derived
    (tmp_path / "warden_ed25519.pub").write_text("ssh-ed25519 AAAAfrompub warden\n")
    assert public_key_line(settings) == "ssh-ed25519 AAAAfrompub warden"
    host_key = HostConfig(name="h", key_file=str(private))
    assert public_key_line(Settings(hosts=(HostConfig(name="none"), host_key))) == (
        "ssh-ed25519 AAAAfrompub warden"
    )


def test_public_key_line_says_what_is_missing(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"set ssh\.key_file"):
        public_key_line(Settings())
    missing = make_settings(ssh_key_file=str(tmp_path / "nope"))
    with pytest.raises(ConfigError, match="cannot read the SSH key") as caught:
        public_key_line(missing)
    assert "ssh.key_file" in caught.value.details
    garbage = tmp_path / "garbage"
    garbage.write_text("not a key\n")
    with pytest.raises(ConfigError, match="cannot read the SSH key"):
        public_key_line(make_settings(ssh_key_file=str(garbage)))


def test_ssh_options_come_from_the_ssh_settings() -> None:
    ssh = SshSettings(known_hosts="/k", connect_timeout_s=3.0)
    runner = TaskRunner(Settings(ssh=ssh))
    assert runner.options == fleet.SshOptions.from_settings(ssh)
