"""Job tasks in real screen and tmux sessions, through a real OpenSSH sshd (tests/support/sshd.py).

Each test creates its own unprivileged Unix user (so it needs root; the user, its processes
and its screen/tmux sockets are removed afterwards), who logs in with the client key of the
test's sshd as Warden does with `ssh.key_file`. Every test runs once with screen and
once with tmux (a multiplexer whose binary is missing is skipped).
"""

from __future__ import annotations

import asyncio
import os
import shlex
import shutil
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TypeVar

import pytest

from services.jobs.runner import TaskRunner
from services.jobs.scripts import Probe, Started, session_name
from services.shared.config import HostConfig, JobSettings, Settings, SshSettings
from services.shared.remote import ssh as fleet
from tests.support.polling import until
from tests.support.processes import ps_row
from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating a Unix user for the job owner needs root"
)

DEADLINE_S = 20.0
STATE_DIR = ".warden/tasks"
SCREEN_DIR = Path("/run/screen")
T = TypeVar("T")

MULTIPLEXERS = [
    pytest.param(
        name,
        marks=pytest.mark.skipif(shutil.which(name) is None, reason=f"{name} is not installed"),
    )
    for name in ("screen", "tmux")
]


@pytest.fixture
def screen_dir() -> Iterator[None]:
    """/run/screen (mode 777, as Debian's tmpfiles.d makes it at boot) if it is missing."""
    created = False
    if not SCREEN_DIR.exists():
        SCREEN_DIR.mkdir(mode=0o777)
        SCREEN_DIR.chmod(0o777)
        created = True
    try:
        yield
    finally:
        if created:
            shutil.rmtree(SCREEN_DIR, ignore_errors=True)


@dataclass
class Setup:
    sshd: Sshd
    owner: UnixUser
    host: HostConfig
    runner: TaskRunner
    multiplexer: str
    job: int
    shell: fleet.SshHostShell  # the owner's own login, to look around

    def session(self, task: int) -> str:
        return session_name(self.job, task)

    async def as_owner(self, command: str) -> fleet.CommandResult:
        return await self.shell.run(command, DEADLINE_S)

    async def sessions_listed(self) -> str:
        """What the owner's `screen -ls` or `tmux ls` prints."""
        listing = "screen -ls" if self.multiplexer == "screen" else "tmux ls"
        return (await self.as_owner(f"{listing} 2>&1; true")).stdout

    async def poll(self, *tasks: int) -> dict[str, Probe]:
        return await self.runner.poll(self.host, self.owner.name, [self.session(t) for t in tasks])

    async def until(self, check: Callable[[], Awaitable[T | None]], what: str) -> T:
        return await until(check, what, DEADLINE_S, interval=0.1)

    async def ended(self, task: int) -> Probe:
        async def check() -> Probe | None:
            probe = (await self.poll(task))[self.session(task)]
            return None if probe.state == "running" else probe

        return await self.until(check, f"the end of task {task}")

    async def logged(self, task: int, text: str) -> str:
        async def check() -> str | None:
            log = await self.runner.log_tail(self.host, self.owner.name, self.session(task))
            return log if text in log else None

        return await self.until(check, f"{text!r} in the log of task {task}")

    async def start(
        self, task: int, command: str, cwd: str = "", env: dict[str, str] | None = None
    ) -> Started:
        return await self.runner.start(
            self.host, self.owner.name, self.session(task), cwd, command, env or {}
        )


@pytest.fixture(params=MULTIPLEXERS)
async def setup(
    request: pytest.FixtureRequest, sshd: Sshd, unix_user: UnixUser, screen_dir: None
) -> AsyncIterator[Setup]:
    multiplexer = request.param
    ssh = SshSettings(
        known_hosts=str(sshd.known_hosts), connect_timeout_s=10.0, key_file=str(sshd.client_key)
    )
    jobs = JobSettings(multiplexer=multiplexer, state_dir=STATE_DIR)
    host = sshd.host_config("gpu-sshd")  # management user: the one running the tests
    runner = TaskRunner(Settings(ssh=ssh, jobs=jobs, hosts=(host,)))
    own = fleet.SshHostShell(
        replace(host, user=unix_user.name), fleet.SshOptions.from_settings(ssh)
    )
    try:
        yield Setup(sshd, unix_user, host, runner, multiplexer, uuid.uuid4().int % 100000, own)
    finally:
        await runner.close()
        await own.close()


def near_now(moment: datetime | None) -> bool:
    return moment is not None and abs(datetime.now(UTC) - moment) < timedelta(seconds=30)


async def test_two_tasks_run_and_end_with_their_exit_codes(setup: Setup, tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    open_to_all(tmp_path)  # the owner could create the marker, were the value ever run
    work = owned_dir(setup.owner, setup.owner.home / "proj dir")
    weird = f"a  b 'c' \"d\" $(touch {marker}) `touch {marker}` ${{HOME}} \\ ; |"
    env = {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb", "WEIRD": weird, "RANK": "0"}
    show = (
        'printf "cuda=%s\\n" "$CUDA_VISIBLE_DEVICES"; printf "weird=%s\\n" "$WEIRD"; '
        'printf "rank=%s\\n" "$RANK"; printf "pwd=%s\\n" "$(pwd)"; sleep 2'
    )
    first = await setup.start(0, show + "; exit 0", env=env)
    second = await setup.start(1, show + "; exit 3", "proj dir", {**env, "RANK": "1"})
    for started in (first, second):
        assert started.status == "started", started
        assert started.pid and near_now(started.started_at)
    probes = await setup.poll(0, 1)
    assert [p.state for p in probes.values()] == ["running", "running"], probes
    assert probes[setup.session(0)].pid == first.pid
    assert probes[setup.session(0)].started_at == first.started_at
    listed = await setup.sessions_listed()
    assert setup.session(0) in listed and setup.session(1) in listed, listed

    assert await setup.ended(0) == Probe("exited", exit_code=0)
    assert await setup.ended(1) == Probe("exited", exit_code=3)
    log = await setup.logged(0, "pwd=")
    assert log.splitlines() == [
        "cuda=GPU-aaa,GPU-bbb",
        f"weird={weird}",
        "rank=0",
        f"pwd={setup.owner.home}",
    ]
    log = await setup.logged(1, "pwd=")
    assert f"weird={weird}\n" in log and "rank=1\n" in log
    assert f"pwd={work}\n" in log
    assert not marker.exists()
    # The state directory is the owner's and private.
    state = setup.owner.home / STATE_DIR
    assert (state / setup.session(0)).stat().st_mode & 0o777 == 0o700
    assert (state / setup.session(0)).stat().st_uid == setup.owner.uid
    assert state.stat().st_mode & 0o777 == 0o700


async def test_a_missing_working_directory_ends_with_127(setup: Setup) -> None:
    started = await setup.start(0, "echo never", "no such dir")
    assert started.status == "started", started
    assert await setup.ended(0) == Probe("exited", exit_code=127)
    log = await setup.runner.log_tail(setup.host, setup.owner.name, setup.session(0))
    assert "no such dir" in log and "never" not in log


async def test_sigint_stops_a_task_that_cleans_up_and_its_exit_code_lands(setup: Setup) -> None:
    program = (
        "import time\n"
        "print('ready', flush=True)\n"
        "try:\n"
        "    time.sleep(120)\n"
        "except KeyboardInterrupt:\n"
        "    print('saving a checkpoint', flush=True)\n"
        "    time.sleep(0.5)\n"
        "    raise SystemExit(5)\n"
    )
    command = f"python3 -c {shlex.quote(program)}; echo 'not after a stop'"
    assert (await setup.start(0, command)).status == "started"
    await setup.logged(0, "ready")
    answer = await setup.runner.signal(setup.host, setup.owner.name, setup.session(0), "INT")
    assert answer == "signalled"
    assert await setup.ended(0) == Probe("exited", exit_code=5)
    log = await setup.logged(0, "saving a checkpoint")
    assert "not after a stop" not in log


async def test_sigusr1_reaches_a_task_that_checkpoints_and_its_exit_code_lands(
    setup: Setup,
) -> None:
    """The hand-back signal USR1: the runner shell and tee survive it, the program handles it."""
    program = (
        "import signal, sys, time\n"
        "def save(*_):\n"
        "    print('saving a checkpoint', flush=True)\n"
        "    sys.exit(0)\n"
        "signal.signal(signal.SIGUSR1, save)\n"
        "print('ready', flush=True)\n"
        "time.sleep(120)\n"
    )
    command = f"python3 -c {shlex.quote(program)}; echo 'not after a hand-back'"
    assert (await setup.start(0, command)).status == "started"
    await setup.logged(0, "ready")
    answer = await setup.runner.signal(setup.host, setup.owner.name, setup.session(0), "USR1")
    assert answer == "signalled"
    assert await setup.ended(0) == Probe("exited", exit_code=0)
    log = await setup.logged(0, "saving a checkpoint")
    assert "not after a hand-back" not in log


async def test_sigint_ends_a_plain_command_with_130(setup: Setup) -> None:
    assert (await setup.start(0, "echo ready; sleep 120")).status == "started"
    await setup.logged(0, "ready")
    await setup.runner.signal(setup.host, setup.owner.name, setup.session(0), "INT")
    assert await setup.ended(0) == Probe("exited", exit_code=130)


async def test_tasks_ignoring_int_end_by_term_or_kill(setup: Setup) -> None:
    login, host = setup.owner.name, setup.host
    assert (await setup.start(0, "trap '' INT; echo ready; sleep 120")).status == "started"
    assert (await setup.start(1, "trap '' INT TERM; echo ready; sleep 121")).status == "started"
    await setup.logged(0, "ready")
    await setup.logged(1, "ready")
    for task in (0, 1):
        assert await setup.runner.signal(host, login, setup.session(task), "INT") == "signalled"
    await asyncio.sleep(1.0)
    assert [p.state for p in (await setup.poll(0, 1)).values()] == ["running", "running"]
    for task in (0, 1):
        assert await setup.runner.signal(host, login, setup.session(task), "TERM") == "signalled"
    assert await setup.ended(0) == Probe("exited", exit_code=143)
    await asyncio.sleep(1.0)
    assert (await setup.poll(1))[setup.session(1)].state == "running"
    assert await setup.runner.signal(host, login, setup.session(1), "KILL") == "signalled"
    assert await setup.ended(1) == Probe("gone")
    assert await setup.runner.signal(host, login, setup.session(1), "KILL") == "gone"

    async def session_closed() -> bool:
        return setup.session(1) not in await setup.sessions_listed()

    await setup.until(session_closed, "the end of the killed task's session")


async def test_a_live_session_name_is_not_started_twice(setup: Setup) -> None:
    first = await setup.start(0, "echo first; sleep 120")
    assert first.status == "started"
    assert await setup.start(0, "echo second") == Started("exists")
    await setup.logged(0, "first")
    await setup.runner.signal(setup.host, setup.owner.name, setup.session(0), "TERM")
    assert await setup.ended(0) == Probe("exited", exit_code=143)

    async def started_again() -> Started | None:  # once the old session has closed
        again = await setup.start(0, "echo second")
        return again if again.status == "started" else None

    again = await setup.until(started_again, "a new start under the same name")
    assert again.pid != first.pid
    assert await setup.ended(0) == Probe("exited", exit_code=0)
    assert await setup.logged(0, "second") == "second\n"
    old = setup.owner.home / STATE_DIR / setup.session(0) / "log.1"
    assert old.read_text().startswith("first\n")  # (then the shell's "Terminated")


async def test_a_pid_file_naming_another_process_signals_nothing(setup: Setup) -> None:
    login, host = setup.owner.name, setup.host
    other = setup.owner.spawn("sleep", "300")
    try:
        start = await setup.until(
            lambda: asyncio.to_thread(process_start, other.pid, setup.owner.uid), "sleep"
        )
        pid_file = owned_dir(setup.owner, setup.owner.home / STATE_DIR / setup.session(0)) / "pid"
        # The same pid started at another time, and a process of another user (sshd's).
        for content in (f"{other.pid} {start - 100}", f"{setup.sshd.pid} {start}"):
            pid_file.write_text(content + "\n")
            for sig in ("KILL", "TERM", "INT", "0"):
                assert await setup.runner.signal(host, login, setup.session(0), sig) == "gone"
            assert (await setup.poll(0))[setup.session(0)] == Probe("gone")
        await asyncio.sleep(0.3)
        assert other.poll() is None and setup.sshd.running
        # The control: the right start time is the same process.
        pid_file.write_text(f"{other.pid} {start}\n")
        assert await setup.runner.signal(host, login, setup.session(0), "0") == "signalled"
        assert (await setup.poll(0))[setup.session(0)].state == "running"
    finally:
        other.kill()
        other.wait(DEADLINE_S)


def open_to_all(path: Path) -> None:
    path.chmod(0o777)


def owned_dir(owner: UnixUser, path: Path) -> Path:
    """`path` made (with its parents under the owner's home), owned by `owner`."""
    path.mkdir(parents=True)
    part = path
    while part != owner.home:
        os.chown(part, owner.uid, owner.gid)
        part = part.parent
    return path


def process_start(pid: int, uid: int) -> int | None:
    """The start of `pid` as the scripts compute it, once it runs as `uid`."""
    row = ps_row(pid, "uid=,etimes=,args=")
    if len(row) < 3 or row[0] != str(uid) or row[2] != "sleep" or int(row[1]) > 86400:
        return None
    return int(time.time()) - int(row[1])


async def test_a_log_that_is_not_utf8_and_a_command_of_several_lines(setup: Setup) -> None:
    command = "printf 'caf\\351 \\377\\n'\necho second line\nexit 2"
    assert (await setup.start(0, command)).status == "started"
    assert await setup.ended(0) == Probe("exited", exit_code=2)
    log = await setup.logged(0, "second line")
    assert log == "caf\ufffd \ufffd\nsecond line\n"
    # A tail that starts inside a character, and the connection still answers.
    text = "\u2588" * 10 + "\n"
    assert (await setup.start(1, f"printf '{text}'")).status == "started"
    await setup.ended(1)
    tail = await setup.runner.log_tail(setup.host, setup.owner.name, setup.session(1), 8)
    assert tail.endswith("\u2588\u2588\n") and tail.startswith("\ufffd")
    assert (await setup.poll(1))[setup.session(1)] == Probe("exited", exit_code=0)
