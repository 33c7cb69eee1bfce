"""Shells and the SSH reader without a network: error words, the fake shell, probe parsing."""

from __future__ import annotations

import asyncio
import errno
from pathlib import Path

import asyncssh
import pytest

from services.monitor.probe import GpuStatus, parse_probe_output, probe_command
from services.monitor.readers import SshReader
from services.shared.config import HostConfig, SshSettings
from services.shared.remote.ssh import (
    CommandResult,
    FakeHostShell,
    HostUnreachable,
    SshHostShell,
    SshOptions,
    describe_ssh_error,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "nvidia_smi"


@pytest.mark.parametrize(
    ("error", "words"),
    [
        (
            asyncssh.PermissionDenied("Permission denied"),
            "authentication refused (is Warden's public key in authorized_keys?)",
        ),
        (
            asyncssh.HostKeyNotVerifiable("Host key is not trusted"),
            "host key not verified: check the key and accept it with `warden hosts check "
            "NAME` or on the Hosts page (or add it to known_hosts, or set "
            "ssh.accept_new_host_keys = true)",
        ),
        (TimeoutError(), "timed out"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"), "connection refused"),
        (asyncssh.ConnectionLost("Connection lost"), "connection lost"),
        (
            asyncssh.DisconnectError(asyncssh.DISC_BY_APPLICATION, "too many sessions"),
            "disconnected: too many sessions",
        ),
        (
            asyncssh.ProtocolError("bad packet"),  # another DisconnectError
            "disconnected: bad packet",
        ),
        (
            asyncssh.KeyImportError("Invalid private key"),
            "cannot read the SSH key: Invalid private key",
        ),
        (
            FileNotFoundError(errno.ENOENT, "No such file or directory", "/keys/warden"),
            "cannot read the SSH key: [Errno 2] No such file or directory: '/keys/warden'",
        ),
        (OSError(errno.EHOSTUNREACH, "No route to host"), "No route to host"),
        (OSError("socket closed"), "socket closed"),
        (OSError(), "OSError"),
        (
            asyncssh.ChannelOpenError(asyncssh.OPEN_CONNECT_FAILED, "SSH connection closed"),
            "connection lost",
        ),
        (asyncssh.ChannelOpenError(asyncssh.OPEN_RESOURCE_SHORTAGE, "busy"), "busy"),
        (ValueError("odd"), "odd"),
        (RuntimeError(), "RuntimeError"),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
def test_describe_ssh_error(error: BaseException, words: str) -> None:
    assert describe_ssh_error(error) == words


def test_ssh_options_from_settings_and_known_hosts_path(tmp_path: Path) -> None:
    settings = SshSettings(
        connect_timeout_s=3.0,
        keepalive_s=7.0,
        known_hosts=str(tmp_path / "kh"),
        accept_new_host_keys=True,
        key_file="/keys/users",
    )
    options = SshOptions.from_settings(settings)
    assert options == SshOptions(3.0, 7.0, str(tmp_path / "kh"), True, "/keys/users")
    assert options.known_hosts_path() == tmp_path / "kh"
    assert SshOptions().known_hosts_path() == Path("~/.ssh/known_hosts").expanduser()


def test_the_key_for_a_login_is_the_users_key_except_for_the_hosts_own_user() -> None:
    host = HostConfig(name="dgx1", address="10.0.0.1", user="warden", key_file="/keys/host")
    with_user_key = SshOptions(key_file="/keys/users")
    assert with_user_key.key_file_for(host, "alice") == "/keys/users"
    assert with_user_key.key_file_for(host, "warden") == "/keys/host"
    assert SshOptions().key_file_for(host, "alice") == "/keys/host"
    as_alice = with_user_key.as_login(host, "alice")
    assert (as_alice.user, as_alice.key_file, as_alice.address) == (
        "alice",
        "/keys/users",
        "10.0.0.1",
    )


async def test_a_shell_that_gets_no_turn_to_connect_by_its_deadline_says_so() -> None:
    """The process's handshakes are all taken: the shell waits, and at the deadline says it
    did not try (no connection is attempted; the address is never reached)."""
    host = HostConfig(name="dgx1", address="192.0.2.1", user="warden")
    turns = asyncio.Semaphore(1)
    await turns.acquire()  # another shell's handshake
    shell = SshHostShell(host, SshOptions(), handshakes=turns)
    with pytest.raises(HostUnreachable) as waited:
        await shell.run("true", 0.05)
    assert waited.value.details["waiting"] is True
    assert waited.value.details["reason"].startswith("not tried")
    turns.release()
    assert not turns.locked()  # the waiting shell took no turn with it


# -- FakeHostShell ---------------------------------------------------------------------------


async def test_fake_shell_records_commands_and_closes() -> None:
    shell = FakeHostShell("gpu1", lambda command: CommandResult(0, f"ran {command}\n"))
    assert await shell.run("echo ok", 1.0) == CommandResult(0, "ran echo ok\n", "")
    assert await shell.run("nvidia-smi -L", 1.0) == CommandResult(0, "ran nvidia-smi -L\n")
    assert shell.commands == ["echo ok", "nvidia-smi -L"]
    await shell.close()
    await shell.close()
    assert shell.closed == 2


async def test_fake_shell_acts_as_a_dead_host() -> None:
    def dead(command: str) -> CommandResult:
        raise HostUnreachable("gpu1: timed out", {"host": "gpu1", "reason": "timed out"})

    shell = FakeHostShell("gpu1", dead)
    with pytest.raises(HostUnreachable) as failed:
        await shell.run("echo ok", 1.0)
    assert failed.value.details == {"host": "gpu1", "reason": "timed out"}
    assert shell.commands == ["echo ok"]  # asked, even though it failed


# -- SshReader -------------------------------------------------------------------------------


def answering(stdout: str, stderr: str = "", exit_status: int | None = 0) -> FakeHostShell:
    return FakeHostShell("gpu1", lambda command: CommandResult(exit_status, stdout, stderr))


async def test_ssh_reader_runs_the_probe_once_and_parses_its_output() -> None:
    text = (FIXTURES / "a_100x8.txt").read_text()
    shell = answering(text)
    reader = SshReader(shell)
    assert reader.name == "gpu1"

    reading = await reader.read(5.0)

    # One round trip; the first poll of a host also reads its GPU interconnect.
    assert shell.commands == [probe_command(topology=True)]
    assert reading == parse_probe_output(text)
    assert reading.gpu_status is GpuStatus.OK
    assert len(reading.gpus) == 8
    assert all(gpu.fan_speed_percent is None for gpu in reading.gpus)
    assert sorted((p.pid, p.user) for p in reading.processes) == [
        (2714033, "alice"),
        (2714033, "alice"),
        (2714877, "alice"),
        (3001212, "bob"),
    ]
    trainer = next(p for p in reading.processes if p.pid == 2714033)
    assert trainer.command.endswith("train.py --config configs/llama-7b.yaml --gpus 0,1")
    assert reading.cpu is not None and reading.memory_total_mib is not None
    await reader.close()
    assert shell.closed == 1


async def test_ssh_reader_passes_host_unreachable_through() -> None:
    def refused(command: str) -> CommandResult:
        raise HostUnreachable(
            "gpu1: connection refused", {"host": "gpu1", "reason": "connection refused"}
        )

    with pytest.raises(HostUnreachable) as failed:
        await SshReader(FakeHostShell("gpu1", refused)).read(5.0)
    assert failed.value.details["reason"] == "connection refused"


async def test_garbage_output_means_the_probe_did_not_run() -> None:
    reader = SshReader(answering("Welcome to gpu1!\nLast login: yesterday\n"))
    with pytest.raises(HostUnreachable) as failed:
        await reader.read(5.0)
    reason = failed.value.details["reason"]
    assert reason.startswith("probe did not run: ")
    assert "no '@@warden-probe' line" in reason
    assert failed.value.details["host"] == "gpu1"
    assert failed.value.message.startswith("gpu1: the probe did not run")


async def test_the_last_stderr_line_says_why_the_probe_did_not_run() -> None:
    stderr = "sh: 1: something odd\nsh: 2: Syntax error: end of file unexpected\n"
    reader = SshReader(answering("", stderr, exit_status=2))
    with pytest.raises(HostUnreachable) as failed:
        await reader.read(5.0)
    assert failed.value.details["reason"] == (
        "probe did not run: sh: 2: Syntax error: end of file unexpected"
    )


async def test_another_probe_version_is_not_read() -> None:
    reader = SshReader(answering("@@warden-probe 99\n@@end\n"))
    with pytest.raises(HostUnreachable) as failed:
        await reader.read(5.0)
    assert failed.value.details["reason"].startswith("probe did not run: probe output version")
