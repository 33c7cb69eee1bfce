"""The task runner's remote commands, their parsers and `TaskRunner`, without a network.

STATUS, SIGNAL and LOG run for real here, locally, through `<shell> -c <the built command>` as
a login shell runs what SSH hands it (dash and bash when they exist), on a state directory in
tmp_path with pid files naming processes this test started: hostile values must come out as
data. START needs screen or tmux and a user: tests/integration/test_jobs_sshd.py runs it.
`TaskRunner` itself, against a fake shell, is in test_jobs_task_runner.py.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.jobs.scripts import (
    LOG_MARK,
    LOG_SCRIPT,
    RUNNER_SCRIPT,
    SCRIPT_NAME,
    SIGNAL_SCRIPT,
    START_SCRIPT,
    STATUS_SCRIPT,
    Probe,
    Started,
    log_command,
    parse_log,
    parse_signal,
    parse_started,
    parse_status,
    session_name,
    signal_command,
    start_command,
    status_command,
)
from services.shared.config import HostConfig
from services.shared.remote.ssh import CommandResult
from tests.support.polling import until_sync
from tests.support.processes import ps_row

SHELLS = [shell for shell in ("dash", "bash") if shutil.which(shell)]
HOST = HostConfig(name="dgx1", address="10.0.0.1", user="warden", key_file="/keys/host")
T0 = 1795000000
DEADLINE_S = 10.0


def hostile(marker: Path) -> list[str]:
    """Values that would run `touch marker` if any shell read them as code."""
    return [
        f"$(touch {marker})",
        f"`touch {marker}`",
        f'"; touch {marker}; echo "',
        f"'; touch {marker}; echo '",
        f"x; touch {marker}",
        f"x && touch {marker} || touch {marker}",
        f"${{IFS}}touch${{IFS}}{marker}",
        f"$((`touch {marker}`))",
        "-n",
        "*",
        "\\",
    ]


def run_as_login_shell(command: str, shell: str = "sh", timeout: float = 10) -> CommandResult:
    """What sshd does with an exec request: `$SHELL -c <command>`."""
    done = subprocess.run(
        [shell, "-c", command], capture_output=True, text=True, timeout=timeout, check=False
    )
    return CommandResult(done.returncode, done.stdout, done.stderr)


def raw_command(script: str, *args: str) -> str:
    """The command a builder would make, without the builder's checks."""
    return shlex.join(["sh", "-c", script, SCRIPT_NAME, *args])


# --- builders ---------------------------------------------------------------------------------


def test_session_name() -> None:
    assert session_name(12, 0) == "warden-12-0"
    for job, task in ((-1, 0), (1, -1), (True, 0), ("1", 0), (1, 1.0)):
        with pytest.raises(ValueError):
            session_name(job, task)  # type: ignore[arg-type]


def test_builders_pass_values_as_positional_parameters_only() -> None:
    env = {"CUDA_VISIBLE_DEVICES": "GPU-a,GPU-b", "ODD": "a b 'c' \"d\" $(x) `y`\nz"}
    command = start_command("tmux", "warden-3-1", ".warden/tasks", "", "python train.py", env)
    assert shlex.split(command) == [
        *("sh", "-c", START_SCRIPT, SCRIPT_NAME),
        *("tmux", "warden-3-1", ".warden/tasks", "", "python train.py", RUNNER_SCRIPT),
        "CUDA_VISIBLE_DEVICES=GPU-a,GPU-b",
        "ODD=a b 'c' \"d\" $(x) `y`\nz",
    ]
    assert shlex.split(status_command("/s", ["warden-1-0", "warden-1-1"])) == [
        *("sh", "-c", STATUS_SCRIPT, SCRIPT_NAME, "/s", "warden-1-0", "warden-1-1"),
    ]
    assert shlex.split(signal_command("/s", "warden-1-0", "INT")) == [
        *("sh", "-c", SIGNAL_SCRIPT, SCRIPT_NAME, "/s", "warden-1-0", "INT"),
    ]
    assert shlex.split(log_command("/s", "warden-1-0", 100)) == [
        *("sh", "-c", LOG_SCRIPT, SCRIPT_NAME, "/s", "warden-1-0", "100"),
    ]


@settings(max_examples=200, deadline=None)
@given(
    value=st.text(st.characters(exclude_characters="\0")),
    command=st.text(st.characters(exclude_characters="\0"), min_size=1).filter(str.strip),
)
def test_any_value_comes_back_as_one_argument(value: str, command: str) -> None:
    built = start_command("screen", "warden-1-0", "s", "/w d", command, {"X": value, "Y": ""})
    assert shlex.split(built)[8:] == [command, RUNNER_SCRIPT, f"X={value}", "Y="]


BAD_START = [
    {"multiplexer": "byobu"},
    {"session": "warden-1-0; rm -rf ~"},
    {"session": "warden-01-0"},
    {"session": "warden-1"},
    {"session": "warden-1-0-0"},
    {"session": "other-1-0"},
    {"state_dir": ""},
    {"state_dir": "a\nb"},
    {"cwd": "a\nb"},
    {"cwd": "a\0b"},
    {"command": ""},
    {"command": "   "},
    {"command": "a\0b"},
    {"env": {"1X": "v"}},
    {"env": {"A-B": "v"}},
    {"env": {"A=B": "v"}},
    {"env": {"": "v"}},
    {"env": {"A": "v\0"}},
    {"env": {"A": 1}},
]


@pytest.mark.parametrize("change", BAD_START)
def test_start_command_refuses_bad_values(change: dict[str, object]) -> None:
    values: dict[str, object] = {
        "multiplexer": "screen",
        "session": "warden-1-0",
        "state_dir": ".warden/tasks",
        "cwd": "",
        "command": "true",
        "env": {},
    }
    values.update(change)
    with pytest.raises(ValueError):
        start_command(**values)  # type: ignore[arg-type]


def test_a_command_may_span_lines() -> None:
    command = start_command("screen", "warden-1-0", "s", "", "echo a\necho b", {})
    assert "echo a\necho b" in shlex.split(command)


@pytest.mark.parametrize(
    "build",
    [
        lambda: status_command("s", ["warden-1-0", "warden-x-0"]),
        lambda: status_command("s", "warden-1-0"),
        lambda: status_command("", ["warden-1-0"]),
        lambda: signal_command("s", "warden-1-0", "HUP"),
        lambda: signal_command("s", "warden-1-0", "SIGINT"),
        lambda: signal_command("s", "warden-1-0", "9"),
        lambda: signal_command("s", "warden-1-0\n", "INT"),
        lambda: log_command("s", "warden-1-0", -1),
        lambda: log_command("s", "warden-1-0", True),
        lambda: log_command("s", "warden-1-0", 1 << 30),
        lambda: log_command("s\n", "warden-1-0", 10),
    ],
)
def test_other_builders_refuse_bad_values(build: Callable[[], str]) -> None:
    with pytest.raises(ValueError):
        build()


# --- the scripts, run locally ------------------------------------------------------------------


class Tasks:
    """A state directory with tasks whose pid files name processes this test started."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.processes: list[subprocess.Popen[bytes]] = []

    def dir(self, session: str) -> Path:
        path = self.root / session
        path.mkdir(parents=True, exist_ok=True)
        return path

    def write(self, session: str, name: str, text: str) -> None:
        (self.dir(session) / name).write_text(text)

    def spawn(self, *argv: str) -> tuple[subprocess.Popen[bytes], int]:
        """A process leading its own process group, and its start as the scripts see it."""
        process = subprocess.Popen(list(argv), start_new_session=True)
        self.processes.append(process)

        def start() -> int | None:
            row = ps_row(process.pid, "etimes=,args=")
            if row and row[1] == argv[0] and int(row[0]) < 86400:
                return int(time.time()) - int(row[0])
            return None

        return process, until_sync(start, f"{argv} starting", DEADLINE_S, interval=0.01)

    def running(self, session: str, *argv: str) -> subprocess.Popen[bytes]:
        process, start = self.spawn(*argv)
        self.write(session, "pid", f"{process.pid} {start}\n")
        return process


@pytest.fixture
def tasks(tmp_path: Path) -> Iterator[Tasks]:
    state = Tasks(tmp_path / "state dir $(x)")
    state.root.mkdir()
    yield state
    for process in state.processes:  # only what this test started, by pid
        if process.poll() is None:
            process.kill()
        process.wait(DEADLINE_S)


@pytest.mark.parametrize("shell", SHELLS)
def test_status_script_reports_each_session(tasks: Tasks, shell: str) -> None:
    tasks.write("warden-1-0", "exit", "3\n")
    tasks.write("warden-1-0", "pid", "1 1\n")  # exit wins over pid
    live = tasks.running("warden-1-1", "sleep", "60")
    tasks.write("warden-1-2", "pid", f"{live.pid} {T0}\n")  # the same pid, another start
    tasks.dir("warden-1-3")  # no pid file yet
    tasks.write("warden-1-4", "exit", "garbage\n")
    tasks.write("warden-1-5", "pid", "not a pid\n")
    sessions = [f"warden-1-{i}" for i in range(7)]
    result = run_as_login_shell(status_command(str(tasks.root), sessions), shell)
    start = (tasks.root / "warden-1-1" / "pid").read_text().split()[1]
    assert result.stdout.splitlines() == [
        "warden-1-0 exited 3",
        f"warden-1-1 running {live.pid} {start}",
        "warden-1-2 gone",
        "warden-1-3 unknown",
        "warden-1-4 exited -",
        "warden-1-5 gone",
        "warden-1-6 unknown",
        "ok",
    ], result
    assert parse_status(result) == {
        "warden-1-0": Probe("exited", exit_code=3),
        "warden-1-1": Probe("running", live.pid, datetime.fromtimestamp(int(start), UTC)),
        "warden-1-2": Probe("gone"),
        "warden-1-3": Probe("unknown"),
        "warden-1-4": Probe("exited"),
        "warden-1-5": Probe("gone"),
        "warden-1-6": Probe("unknown"),
    }


def test_status_script_relative_state_dir_is_in_home(tasks: Tasks, tmp_path: Path) -> None:
    tasks.write("warden-2-0", "exit", "0\n")
    command = status_command(tasks.root.name, ["warden-2-0"])
    done = subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        env={**os.environ, "HOME": str(tmp_path)},
        cwd="/",
        check=False,
    )
    assert done.stdout == "warden-2-0 exited 0\nok\n"


@pytest.mark.parametrize("shell", SHELLS)
def test_scripts_refuse_what_the_builders_refuse(tasks: Tasks, shell: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    state = str(tasks.root)
    for value in [*hostile(marker), "warden-01-0", "warden-1-0-1", "warden--0", "warden-1-"]:
        for command in (
            raw_command(STATUS_SCRIPT, state, "warden-1-0", value),
            raw_command(SIGNAL_SCRIPT, state, value, "INT"),
            raw_command(SIGNAL_SCRIPT, state, "warden-1-0", value),
            raw_command(LOG_SCRIPT, state, value, "10"),
            raw_command(LOG_SCRIPT, state, "warden-1-0", value),
            raw_command(START_SCRIPT, "screen", value, state, "", "true", RUNNER_SCRIPT, "A=1"),
            raw_command(
                START_SCRIPT, "screen", "warden-1-0", state, "", "true", RUNNER_SCRIPT, value
            ),
            raw_command(START_SCRIPT, value, "warden-1-0", state, "", "true", RUNNER_SCRIPT, "A=1"),
        ):
            result = run_as_login_shell(command, shell)
            assert result.stdout == "invalid\n", (value, command, result)
            assert result.exit_status == 2
    for empty_state in (
        raw_command(STATUS_SCRIPT, "", "warden-1-0"),
        raw_command(SIGNAL_SCRIPT, "", "warden-1-0", "0"),
        raw_command(LOG_SCRIPT, "", "warden-1-0", "1"),
        raw_command(START_SCRIPT, "tmux", "warden-1-0", "", "", "true", RUNNER_SCRIPT),
        raw_command(START_SCRIPT, "tmux", "warden-1-0", state, "", "", RUNNER_SCRIPT),
    ):
        assert run_as_login_shell(empty_state, shell).stdout == "invalid\n"
    assert not marker.exists()
    assert not (tasks.root / "warden-1-0").exists()


def live_members(pgid: int) -> list[str]:
    """The processes of group `pgid` that have not ended (zombies have)."""
    rows = subprocess.run(
        ["ps", "-e", "-o", "pgid=,stat=,pid="], capture_output=True, text=True, check=False
    ).stdout.splitlines()
    return [row for row in rows if row.split()[0] == str(pgid) and row.split()[1][0] != "Z"]


@pytest.mark.parametrize("shell", SHELLS)
def test_signal_script_signals_the_whole_group_of_the_same_process(
    tasks: Tasks, shell: str
) -> None:
    leader = tasks.running("warden-4-0", "sh", "-c", "sleep 60 & sleep 61; wait")
    state = str(tasks.root)
    check = run_as_login_shell(signal_command(state, "warden-4-0", "0"), shell)
    assert parse_signal(check) == "signalled"
    assert leader.poll() is None
    result = run_as_login_shell(signal_command(state, "warden-4-0", "TERM"), shell)
    assert parse_signal(result) == "signalled", result
    assert leader.wait(DEADLINE_S) == -signal.SIGTERM
    until_sync(  # the children got it too
        lambda: not live_members(leader.pid), "the group's other processes ending", DEADLINE_S
    )
    again = run_as_login_shell(signal_command(state, "warden-4-0", "KILL"), shell)
    assert parse_signal(again) == "gone"


@pytest.mark.parametrize("shell", SHELLS)
def test_signal_script_leaves_a_reused_pid_alone(tasks: Tasks, shell: str) -> None:
    other, start = tasks.spawn("sleep", "60")
    state = str(tasks.root)
    for pid_file in (f"{other.pid} {start - 60}", f"{other.pid} {start + 60}", f"{other.pid}"):
        tasks.write("warden-5-0", "pid", pid_file + "\n")
        for sig in ("INT", "TERM", "KILL", "0"):
            result = run_as_login_shell(signal_command(state, "warden-5-0", sig), shell)
            assert parse_signal(result) == "gone", (pid_file, sig, result)
    assert run_as_login_shell(signal_command(state, "warden-5-1", "KILL")).stdout == "gone\n"
    time.sleep(0.2)
    assert other.poll() is None


@pytest.mark.parametrize("shell", SHELLS)
def test_log_script_prints_the_tail_verbatim(tasks: Tasks, shell: str, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    text = "".join(f"line {i}: {value}\n" for i, value in enumerate(hostile(marker)))
    tasks.write("warden-6-0", "log", text)
    state = str(tasks.root)
    result = run_as_login_shell(log_command(state, "warden-6-0", 1 << 20), shell)
    assert parse_log(result) == text
    tail = run_as_login_shell(log_command(state, "warden-6-0", 10), shell)
    assert parse_log(tail) == text.encode()[-10:].decode()
    assert parse_log(run_as_login_shell(log_command(state, "warden-6-0", 0), shell)) == ""
    missing = run_as_login_shell(log_command(state, "warden-6-1", 10), shell)
    assert missing.stdout == f"{LOG_MARK} missing\n"
    assert parse_log(missing) == ""
    assert not marker.exists()


# --- parsers ------------------------------------------------------------------------------------


def out(text: str, status: int = 0) -> CommandResult:
    return CommandResult(status, text)


NOISE = "Welcome to dgx1!\nstarted reading your .bashrc\nok then\n"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("started 4242 1795000000\n", Started("started", 4242, datetime.fromtimestamp(T0, UTC))),
        (NOISE + "started 7 1795000000\n", Started("started", 7, datetime.fromtimestamp(T0, UTC))),
        (NOISE + "exists\n", Started("exists")),
        ("failed screen is not installed\n", Started("failed", detail="screen is not installed")),
        ("failed\n", Started("failed", detail="no reason given")),
        (
            "invalid\n",
            Started("failed", detail="the host's script refused the arguments (invalid)"),
        ),
        ("started x 1795000000\n", None),
        ("started 12\n", None),
        ("started 012 1795000000\n", None),
        (NOISE, None),
        ("", None),
    ],
)
def test_parse_started(text: str, expected: Started | None) -> None:
    assert parse_started(out(text)) == expected


def test_parse_status_skips_rc_noise_and_reads_each_line() -> None:
    text = (
        "Welcome!\nwarden is watching you\n"
        "warden-1-0 running 99 1795000000\nwarden-1-1 exited 0\nwarden-1-2 exited -\n"
        "warden-1-3 gone\nwarden-1-4 unknown\nok\n\n"
    )
    assert parse_status(out(text)) == {
        "warden-1-0": Probe("running", 99, datetime.fromtimestamp(T0, UTC)),
        "warden-1-1": Probe("exited", exit_code=0),
        "warden-1-2": Probe("exited"),
        "warden-1-3": Probe("gone"),
        "warden-1-4": Probe("unknown"),
    }
    assert parse_status(out("ok\n")) == {}


@pytest.mark.parametrize(
    "text",
    [
        "",
        "warden-1-0 exited 0\n",  # no ok: cut short
        "ok\nwarden-1-0 exited 0\n",
        "warden-1-0 running 99\nok\n",
        "warden-1-0 running x 1795000000\nok\n",
        "warden-1-0 exited x\nok\n",
        "warden-1-0 exited 1 2\nok\n",
        "warden-1-0 gone 5\nok\n",
        "warden-1-0 sleeping\nok\n",
        "invalid\n",
    ],
)
def test_parse_status_refuses_malformed_output(text: str) -> None:
    assert parse_status(out(text)) is None


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("signalled\n", "signalled"),
        (NOISE + "gone\n", "gone"),
        ("failed\n", "failed"),
        ("invalid\n", "invalid"),
        (NOISE, None),
        ("", None),
    ],
)
def test_parse_signal(text: str, expected: str | None) -> None:
    assert parse_signal(out(text)) == expected


def test_parse_log() -> None:
    body = "epoch 1\nepoch 2 (no newline at the end)"
    text = f"motd\n{LOG_MARK} begin\n{body}\n{LOG_MARK} ok 123\n"
    assert parse_log(out(text)) == body
    with_newline = f"{LOG_MARK} begin\nline\n\n{LOG_MARK} ok 5\n"
    assert parse_log(out(with_newline)) == "line\n"
    tricky = f"{LOG_MARK} begin\nfake {LOG_MARK} begin\n\n{LOG_MARK} ok 9\n"
    assert parse_log(out(tricky)) == f"fake {LOG_MARK} begin\n"
    assert parse_log(out(f"{LOG_MARK} missing\n")) == ""
    assert parse_log(out("motd only\n")) is None
    assert parse_log(out(f"\n{LOG_MARK} ok 5\n")) is None  # no begin
    assert parse_log(out(f"{LOG_MARK} begin\npartial")) is None  # cut short
