"""The violation actions' remote commands and handlers, without a network.

The scripts run for real here, locally, through `sh -c <the built command>` as a login shell
runs what SSH hands it (with dash and with bash when they exist): hostile values must come out
as data, never run. The handlers run against `FakeHostShell`.
"""

from __future__ import annotations

import os
import pwd
import select
import shlex
import shutil
import subprocess
import time
import tty
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from services.shared.config import HostConfig, ViolationSettings
from services.shared.remote.ssh import CommandResult
from services.violations.actions.base import Alert, Process
from services.violations.actions.message import terminal_text
from services.violations.actions.remote import FakeHostShell, RemoteCommandFailed, login_for
from services.violations.actions.signals import kill, terminate
from services.violations.actions.terminal import notify_terminals
from services.violations.scripts import (
    SIGNAL_SCRIPT,
    WHO_SCRIPT,
    WRITE_TTY_SCRIPT,
    SignalResult,
    TerminalSession,
    WriteResult,
    clean_message,
    parse_signal_result,
    parse_who,
    parse_write_result,
    signal_command,
    who_command,
    write_command,
)
from tests.support.polling import until_sync

ME = pwd.getpwuid(os.getuid()).pw_name
SHELLS = [shell for shell in ("dash", "bash") if shutil.which(shell)]
HOST = HostConfig(name="gpu1", address="10.0.0.1", user="warden", key_file="/keys/host")
T0 = datetime(2026, 11, 21, 14, 0, 5, tzinfo=UTC)


def hostile(marker: Path) -> list[str]:
    """Values that would run `touch marker` if any shell read them as code."""
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f'"; touch {marker}; echo "',
        f"'; touch {marker}; echo '",
        f"x\ntouch {marker}\n",
        f"x; touch {marker}",
        f"x && touch {marker} || touch {marker}",
        f"${{IFS}}touch${{IFS}}{marker}",
        f"$((`touch {marker}`))",
        f"a[$(touch {marker})]",  # bash evaluates this inside $(( ))
        "-n",
        "*",
        "\\",
        "",
    ]


def run_as_login_shell(command: str, shell: str = "sh", timeout: float = 10) -> CommandResult:
    """What sshd does with an exec request: `$SHELL -c <command>`."""
    done = subprocess.run(
        [shell, "-c", command], capture_output=True, text=True, timeout=timeout, check=False
    )
    return CommandResult(done.returncode, done.stdout, done.stderr)


def raw_command(script: str, *args: str) -> str:
    """The command a builder would make, without the builder's checks."""
    return shlex.join(["sh", "-c", script, "warden", *args])


# --- builders ---------------------------------------------------------------------------------


def test_builders_pass_values_as_positional_parameters_only() -> None:
    assert shlex.split(who_command()) == ["sh", "-c", WHO_SCRIPT, "warden"]
    assert shlex.split(who_command(sudo=True)) == ["sudo", "-n", "sh", "-c", WHO_SCRIPT, "warden"]
    assert shlex.split(write_command("pts/3", "alice", "hi $(x)\r\n", sudo=True)) == [
        *("sudo", "-n", "sh", "-c", WRITE_TTY_SCRIPT, "warden"),
        *("pts/3", "alice", "hi $(x)\r\n"),
    ]
    assert shlex.split(signal_command(4242, "bob", T0, "TERM")) == [
        *("sh", "-c", SIGNAL_SCRIPT, "warden"),
        *("4242", "bob", str(int(T0.timestamp())), "2", "TERM"),
    ]


def test_signal_command_unknown_start_is_an_empty_argument() -> None:
    assert shlex.split(signal_command(7, "bob", None, "KILL"))[-3:] == ["", "2", "KILL"]


def test_signal_command_reads_a_naive_time_as_utc() -> None:
    naive = T0.replace(tzinfo=None)
    assert signal_command(7, "bob", naive, "0") == signal_command(7, "bob", T0, "0")
    paris = T0.astimezone(ZoneInfo("Europe/Paris"))
    assert signal_command(7, "bob", paris, "0") == signal_command(7, "bob", T0, "0")


BAD_SIGNAL_VALUES = [
    (0, "TERM", 2),
    (-1, "TERM", 2),
    (True, "TERM", 2),
    ("12", "TERM", 2),
    (12, "HUP", 2),
    (12, "SIGKILL", 2),
    (12, "9", 2),
    (12, "KILL", -1),
    (12, "KILL", 1.5),
]


@pytest.mark.parametrize(("pid", "signal", "tolerance"), BAD_SIGNAL_VALUES)
def test_signal_command_refuses_bad_values(pid: object, signal: str, tolerance: object) -> None:
    with pytest.raises(ValueError):
        signal_command(pid, "bob", T0, signal, tolerance_s=tolerance)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "name",
    ["pts/x", "pts/", "tty", "/dev/pts/1", "pts/1/../../etc", "pts/1\n", "pts/\u0661", "ttyS0"],
)
def test_write_command_refuses_what_is_not_a_terminal(name: str) -> None:
    with pytest.raises(ValueError):
        write_command(name, "alice", "hello")


def test_clean_message_keeps_cr_lf_and_text_only() -> None:
    dirty = "\x1b]0;pwned\x07\x1b[2J\tWarden: stop\x00\x7f\x9b31m now\r\n* done é…\r\n"
    assert clean_message(dirty) == "]0;pwned[2JWarden: stop31m now\r\n* done é…\r\n"
    assert len(clean_message("x" * 100_000)) == 4096


# --- the scripts, run for real ----------------------------------------------------------------


@pytest.fixture
def pty_of_mine() -> Iterator[tuple[str, int]]:
    """A pseudo-terminal owned by the user running the tests: (name such as pts/3, master)."""
    master, slave = os.openpty()
    tty.setraw(slave)  # no CR added before LF: read back exactly what was written
    name = os.ttyname(slave).removeprefix("/dev/")
    try:
        yield name, master
    finally:
        os.close(slave)
        os.close(master)


def start_of(pid: int) -> datetime:
    """When `pid` started, as the monitor computes it: the clock minus `ps`'s etimes.

    procps (4.0.2 at least) can print a wrapped, huge etimes for a process forked a moment
    ago: read again until it makes sense.
    """

    def start() -> datetime | None:
        ps = ["ps", "-o", "etimes=", "-p", str(pid)]
        etimes = int(subprocess.run(ps, capture_output=True, text=True, check=True).stdout)
        return datetime.fromtimestamp(int(time.time()) - etimes, UTC) if etimes < 86400 else None

    return until_sync(start, f"a sensible etimes of pid {pid} from ps", 10, interval=0.01)


def read_available(fd: int, wait_s: float = 2.0) -> bytes:
    data = b""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], 0.05)
        if ready:
            data += os.read(fd, 65536)
        elif data:
            break
    return data


@pytest.mark.parametrize("shell", SHELLS)
def test_write_tty_writes_hostile_text_as_text(
    shell: str, tmp_path: Path, pty_of_mine: tuple[str, int]
) -> None:
    name, master = pty_of_mine
    marker = tmp_path / "pwned"
    for value in hostile(marker):
        message = f"<{value}>\r\n"
        result = run_as_login_shell(write_command(name, ME, message), shell)
        assert parse_write_result(result.stdout) == WriteResult("written"), result
        assert read_available(master) == clean_message(message).encode()
        result = run_as_login_shell(write_command(name, value or "x", "hi"), shell)
        assert parse_write_result(result.stdout) == WriteResult("not-owner", ME), result
    assert read_available(master, 0.2) == b""
    assert not marker.exists()


@pytest.mark.parametrize("shell", SHELLS)
def test_write_tty_script_refuses_bad_terminal_names(shell: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    for value in [*hostile(marker), "pts/1/../0", "../pts/0", "pts/0 ", " pts/0", "ttyS0"]:
        result = run_as_login_shell(raw_command(WRITE_TTY_SCRIPT, value, ME, "hi"), shell)
        assert parse_write_result(result.stdout) == WriteResult("invalid"), (value, result)
    result = run_as_login_shell(write_command("pts/987654", ME, "hi"), shell)
    assert parse_write_result(result.stdout) == WriteResult("gone")
    assert not marker.exists()


@pytest.fixture
def sleeper() -> Iterator[tuple[subprocess.Popen[bytes], datetime]]:
    """A `sleep` of ours and its start time as the monitor computes it (clock - etimes)."""
    process = subprocess.Popen(["sleep", "60"])
    try:
        yield process, start_of(process.pid)
    finally:
        process.kill()
        process.wait()


@pytest.mark.parametrize("shell", SHELLS)
def test_signal_script_checks_user_and_start_before_signalling(
    shell: str, tmp_path: Path, sleeper: tuple[subprocess.Popen[bytes], datetime]
) -> None:
    process, started = sleeper
    marker = tmp_path / "pwned"

    def signal(*args: str) -> SignalResult | None:
        result = run_as_login_shell(raw_command(SIGNAL_SCRIPT, *args), shell)
        return parse_signal_result(result.stdout)

    def mismatch(answer: SignalResult | None) -> bool:
        """A mismatch naming our sleep (its start as the script sees it: within 2 s)."""
        return (
            answer is not None
            and answer.status == "mismatch"
            and answer.user == ME
            and answer.started_at is not None
            and abs((answer.started_at - started).total_seconds()) <= 2
        )

    pid, start = str(process.pid), str(int(started.timestamp()))
    assert signal(pid, ME, start, "2", "0") == SignalResult("signalled")
    for value in hostile(marker):
        assert mismatch(signal(pid, value, start, "2", "0"))
        for args in (
            (value, ME, start, "2", "0"),
            (pid, ME, value, "2", "0"),
            (pid, ME, start, value, "0"),
            (pid, ME, start, "2", value),
        ):
            if value == "" and args[2] == "":
                continue  # an empty start is "unknown", tested below
            assert signal(*args) == SignalResult("invalid"), (args, shell)
    for bad_number in ("012", "1e3", "0x10", "-5", " 5", "5 ", "\uff15"):
        assert signal(pid, ME, start, bad_number, "0") == SignalResult("invalid")
    assert process.poll() is None and not marker.exists()

    # Unknown start: refused, even though everything else matches.
    assert mismatch(signal(pid, ME, "", "2", "KILL"))
    # Another start (a reused pid): refused.
    earlier = str(int(started.timestamp()) - 60)
    assert mismatch(signal(pid, ME, earlier, "2", "KILL"))
    assert process.poll() is None

    assert signal(pid, ME, start, "2", "TERM") == SignalResult("signalled")
    assert process.wait(10) == -15
    assert signal(pid, ME, start, "2", "KILL") == SignalResult("gone")


def test_signal_script_counts_a_zombie_as_gone(
    sleeper: tuple[subprocess.Popen[bytes], datetime],
) -> None:
    process, started = sleeper
    command = signal_command(process.pid, ME, started, "KILL")
    assert parse_signal_result(run_as_login_shell(command).stdout) == SignalResult("signalled")

    def zombie() -> bool:
        stat = ["ps", "-o", "stat=", "-p", str(process.pid)]
        return "Z" in subprocess.run(stat, capture_output=True, text=True).stdout

    until_sync(zombie, "the killed sleep becoming a zombie", 5, interval=0.02)
    # Not reaped yet (Popen has not waited): a zombie, which no signal can end.
    assert parse_signal_result(run_as_login_shell(command).stdout) == SignalResult("gone")


def test_who_script_runs() -> None:
    result = run_as_login_shell(who_command())
    assert result.exit_status == 0, result
    parse_who(result.stdout)  # whatever utmp holds here, it parses


# --- parsers ----------------------------------------------------------------------------------

WHO_C_LOCALE = """\
alice    pts/0        Nov 21 14:02 (10.0.0.5)
bob      tty1         Nov  2 09:15
alice    pts/12       Nov 21 15:40 (tmux(4242).%0)
carol    :0           Nov 20 08:00 (:0)
dave     pts/3        Nov 21 16:01 (2001:db8::1)
alice    pts/0        Nov 21 14:02 (10.0.0.5)
a-very-long-user-name pts/7 Nov 21 16:02 (10.0.0.9)
"""
WHO_ISO_LOCALE = """\
alice    pts/0        2026-11-21 14:02 (10.0.0.5)
erin     seat0        2026-11-20 08:00 (login screen)
erin     tty2         2026-11-20 08:00 (tty2)
"""


def test_parse_who_reads_terminals_and_skips_the_rest() -> None:
    assert parse_who(WHO_C_LOCALE) == [
        TerminalSession("alice", "pts/0"),
        TerminalSession("bob", "tty1"),
        TerminalSession("alice", "pts/12"),
        TerminalSession("dave", "pts/3"),
        TerminalSession("a-very-long-user-name", "pts/7"),
    ]
    assert parse_who(WHO_ISO_LOCALE) == [
        TerminalSession("alice", "pts/0"),
        TerminalSession("erin", "tty2"),
    ]
    assert parse_who("") == []
    assert parse_who("Welcome to gpu1!\n\nalice pts/x Nov 21\nbob\n") == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("signalled\n", SignalResult("signalled")),
        ("gone\n", SignalResult("gone")),
        ("failed\n", SignalResult("failed")),
        ("invalid\n", SignalResult("invalid")),
        (
            "mismatch bob 1795269600\n",
            SignalResult("mismatch", "bob", datetime(2026, 11, 21, 14, 0, tzinfo=UTC)),
        ),
        ("mismatch\n", SignalResult("mismatch")),
        ("mismatch bob soon\n", SignalResult("mismatch", "bob")),
        ("Welcome!\nsignalled: yes\nsignalled\n", SignalResult("signalled")),
        ("motd says gone\nsignalled\n", SignalResult("signalled")),
        ("", None),
        ("sudo: a password is required\n", None),
        ("Signalled\n", None),
    ],
)
def test_parse_signal_result(text: str, expected: SignalResult | None) -> None:
    assert parse_signal_result(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("written\n", WriteResult("written")),
        ("gone\n", WriteResult("gone")),
        ("not-owner bob\n", WriteResult("not-owner", "bob")),
        ("not-owner \n", WriteResult("not-owner", "")),
        ("failed\n", WriteResult("failed")),
        ("hello from .bashrc\nwritten\n", WriteResult("written")),
        ("", None),
    ],
)
def test_parse_write_result(text: str, expected: WriteResult | None) -> None:
    assert parse_write_result(text) == expected


# --- who logs in ------------------------------------------------------------------------------


def test_login_for() -> None:
    as_offender = ViolationSettings(act_as="offender")
    assert login_for(HOST, as_offender, "alice") == ("alice", False)
    as_management = ViolationSettings(act_as="management")
    assert login_for(HOST, as_management, "alice") == ("warden", True)
    with pytest.raises(ValueError):
        login_for(HOST, ViolationSettings(act_as="someone"), "alice")


# --- handlers against the fake shell ----------------------------------------------------------

OFFENDER = ViolationSettings(act_as="offender", terminal_as="act_as", term_grace_s=7.5)
MANAGEMENT = ViolationSettings(act_as="management", terminal_as="act_as", term_grace_s=7.5)
P1 = Process(pid=4242, command="python train.py", started_at=T0)
P2 = Process(pid=777, command="python eval.py", started_at=T0 - timedelta(hours=1))


def make_alert(*processes: Process) -> Alert:
    return Alert(
        incident_id="inc-1",
        host="gpu1",
        gpu_uuid="GPU-1",
        gpu_index=0,
        offender="alice",
        processes=processes,
        since=T0,
        owner="bob",
        reservation_end=T0 + timedelta(hours=2),
        step="0s terminal offender",
        next_step="300s terminate",
        next_at=T0 + timedelta(minutes=5),
    )


def ok(stdout: str) -> CommandResult:
    return CommandResult(0, stdout, "")


class Sleeps:
    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)


async def test_notify_writes_to_each_terminal_of_the_offender() -> None:
    shell = FakeHostShell()
    alert = make_alert(P1)
    shell.script(who_command(), ok(WHO_C_LOCALE))
    text = terminal_text(alert)
    shell.script(write_command("pts/0", "alice", text), ok("written\n"))
    shell.script(write_command("pts/12", "alice", text), ok("not-owner carol\n"))
    outcomes = await notify_terminals(shell, HOST, alert, OFFENDER)
    assert [(o.target, o.ok) for o in outcomes] == [("gpu1:pts/0", True), ("gpu1:pts/12", False)]
    assert "now belongs to carol" in outcomes[1].detail
    assert {(c.host, c.login) for c in shell.calls} == {("gpu1", "alice")}
    assert len(shell.calls) == 3  # who, then one write per terminal (pts/0 listed twice)


async def test_notify_as_management_uses_sudo_and_the_management_login() -> None:
    shell = FakeHostShell()
    alert = make_alert(P1)
    shell.script(who_command(sudo=True), ok("alice    pts/4        Nov 21 14:02 (x)\n"))
    shell.script(write_command("pts/4", "alice", terminal_text(alert), True), ok("written\n"))
    outcomes = await notify_terminals(shell, HOST, alert, MANAGEMENT)
    assert [(o.target, o.ok) for o in outcomes] == [("gpu1:pts/4", True)]
    assert [c.login for c in shell.calls] == ["warden", "warden"]
    assert all(c.command.startswith("sudo -n sh -c ") for c in shell.calls)


async def test_notify_by_default_writes_as_the_management_user_in_group_tty() -> None:
    """No sudo and no login as the offender: what an offender's authorized_keys holds does
    not matter."""
    shell = FakeHostShell()
    alert = make_alert(P1)
    shell.script(who_command(), ok("alice    pts/4        Nov 21 14:02 (x)\n"))
    shell.script(write_command("pts/4", "alice", terminal_text(alert)), ok("written\n"))
    outcomes = await notify_terminals(shell, HOST, alert, ViolationSettings())
    assert [(o.target, o.ok) for o in outcomes] == [("gpu1:pts/4", True)]
    assert [c.login for c in shell.calls] == ["warden", "warden"]
    assert not any(c.command.startswith("sudo") for c in shell.calls)

    refused = FakeHostShell()
    refused.script(who_command(), ok("alice    pts/4        Nov 21 14:02 (x)\n"))
    denied = CommandResult(1, "failed\n", "sh: 1: cannot create /dev/pts/4: Permission denied\n")
    refused.script(write_command("pts/4", "alice", terminal_text(alert)), denied)
    [outcome] = await notify_terminals(refused, HOST, alert, ViolationSettings())
    assert not outcome.ok and "is warden in group tty on gpu1?" in outcome.detail


async def test_notify_without_a_session() -> None:
    shell = FakeHostShell()
    shell.script(who_command(), ok("bob      pts/1        Nov 21 14:02 (x)\n"))
    outcomes = await notify_terminals(shell, HOST, make_alert(P1), OFFENDER)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("gpu1", False, "no terminal session of alice on gpu1")
    ]


async def test_notify_reports_an_unreachable_host_and_a_failing_who() -> None:
    shell = FakeHostShell()
    down = RemoteCommandFailed("gpu1: cannot run a command as alice: connection refused")
    shell.script(who_command(), down)
    outcomes = await notify_terminals(shell, HOST, make_alert(P1), OFFENDER)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [("gpu1", False, down.message)]

    shell = FakeHostShell()
    shell.script(who_command(True), CommandResult(1, "", "sudo: a password is required\n"))
    outcomes = await notify_terminals(shell, HOST, make_alert(P1), MANAGEMENT)
    assert not outcomes[0].ok and "sudo: a password is required" in outcomes[0].detail


async def test_terminate_kills_what_ignored_sigterm_after_the_grace() -> None:
    shell = FakeHostShell()
    sleeps = Sleeps()
    p3 = Process(pid=31, command="x", started_at=T0)
    alert = make_alert(P1, P2, p3, P1)
    shell.script(signal_command(4242, "alice", T0, "TERM"), ok("signalled\n"))
    shell.script(signal_command(4242, "alice", T0, "KILL"), ok("gone\n"))
    shell.script(signal_command(777, "alice", P2.started_at, "TERM"), ok("signalled\n"))
    shell.script(signal_command(777, "alice", P2.started_at, "KILL"), ok("signalled\n"))
    shell.script(signal_command(31, "alice", T0, "TERM"), ok("gone\n"))
    outcomes = await terminate(shell, HOST, alert, OFFENDER, sleep=sleeps)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("gpu1:pid 4242", True, "terminated"),
        ("gpu1:pid 777", True, "killed after SIGTERM was ignored"),
        ("gpu1:pid 31", True, "already gone"),
    ]
    assert sleeps.calls == [7.5]
    kills = [c for c in shell.commands if c.endswith(" KILL")]
    assert len(kills) == 2 and not any("' 31 " in c for c in kills)
    assert len(shell.calls) == 5  # the repeated pid is signalled once


async def test_terminate_leaves_a_reused_pid_and_an_unknown_start_alone() -> None:
    shell = FakeHostShell()
    sleeps = Sleeps()
    unknown = Process(pid=55, command="x", started_at=None)
    reused_same_user = Process(pid=56, command="y", started_at=T0)
    shell.script(signal_command(4242, "alice", T0, "TERM"), ok("mismatch carol 1795269600\n"))
    shell.script(signal_command(55, "alice", None, "TERM"), ok("mismatch alice 1795269600\n"))
    shell.script(signal_command(56, "alice", T0, "TERM"), ok("mismatch alice 1795269600\n"))
    alert = make_alert(P1, unknown, reused_same_user)
    outcomes = await terminate(shell, HOST, alert, OFFENDER, sleep=sleeps)
    assert [o.ok for o in outcomes] == [False, False, False]
    assert outcomes[0].detail == (
        "not killed: pid 4242 now belongs to carol (started 2026-11-21 14:00:00 UTC)"
    )
    assert outcomes[1].detail.startswith("not killed: the start time of pid 55 is unknown")
    assert outcomes[2].detail == (
        "not killed: pid 56 now belongs to another process of alice "
        "(started 2026-11-21 14:00:00 UTC, not 2026-11-21 14:00:05 UTC)"
    )
    assert sleeps.calls == [] and not any(c.endswith(" KILL") for c in shell.commands)


async def test_terminate_reports_failures_per_pid() -> None:
    shell = FakeHostShell()
    sleeps = Sleeps()
    shell.script(
        signal_command(4242, "alice", T0, "TERM", sudo=True),
        CommandResult(1, "failed\n", "warden: 21: kill: Operation not permitted\n"),
    )
    shell.script(
        signal_command(777, "alice", P2.started_at, "TERM", sudo=True),
        RemoteCommandFailed("gpu1: cannot run a command as warden: timed out"),
    )
    outcomes = await terminate(shell, HOST, make_alert(P1, P2), MANAGEMENT, sleep=sleeps)
    assert [(o.ok, o.detail) for o in outcomes] == [
        (
            False,
            "not killed: gpu1: SIGTERM failed as warden: warden: 21: kill: Operation not permitted",
        ),
        (False, "not killed: gpu1: cannot run a command as warden: timed out"),
    ]
    assert sleeps.calls == []


async def test_terminate_when_sigkill_fails_after_the_grace() -> None:
    shell = FakeHostShell()
    shell.script(signal_command(4242, "alice", T0, "TERM"), ok("signalled\n"))
    shell.script(signal_command(4242, "alice", T0, "KILL"), CommandResult(255, "", ""))
    outcomes = await terminate(shell, HOST, make_alert(P1), OFFENDER, sleep=Sleeps())
    assert not outcomes[0].ok
    assert outcomes[0].detail == (
        "SIGTERM sent, then not killed: gpu1: SIGKILL gave no answer (exit status 255: no output)"
    )


async def test_kill_sends_sigkill_at_once() -> None:
    shell = FakeHostShell()
    shell.script(signal_command(4242, "alice", T0, "KILL"), ok("signalled\n"))
    shell.script(signal_command(777, "alice", P2.started_at, "KILL"), ok("gone\n"))
    outcomes = await kill(shell, HOST, make_alert(P1, P2), OFFENDER)
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("gpu1:pid 4242", True, "killed"),
        ("gpu1:pid 777", True, "already gone"),
    ]
    assert len(shell.calls) == 2


async def test_no_process_listed() -> None:
    shell = FakeHostShell()
    for outcomes in (
        await kill(shell, HOST, make_alert(), OFFENDER),
        await terminate(shell, HOST, make_alert(), OFFENDER, sleep=Sleeps()),
    ):
        assert [(o.target, o.ok) for o in outcomes] == [("gpu1", False)]
    assert shell.calls == []


async def test_fake_shell_answers_in_order_and_repeats_the_last() -> None:
    shell = FakeHostShell()
    shell.script("x", ok("1"), ok("2"))
    assert [(await shell.run(HOST, "u", "x")).stdout for _ in range(3)] == ["1", "2", "2"]
    assert (await shell.run(HOST, "u", "y")).exit_status == 127
    assert shell.commands == ["x", "x", "x", "y"]
