"""The terminal, terminate and kill handlers against a real OpenSSH sshd (tests/support/sshd.py).

Each test creates its own unprivileged Unix user (so it needs root; it is removed afterwards),
who logs in with the client key of the test's sshd (its AuthorizedKeysFile is one absolute
file, read for every user). "act_as offender" logs in as that user; "act_as management" logs
in as the sshd's user (the one running the tests) with `sudo -n`, and is skipped where sudo
is not installed.

sshd records a session with a terminal in utmp (`who` reads it) only if /run/utmp exists: a
booted system has it (systemd-tmpfiles or the init scripts create it), a bare container often
does not, and then sshd logs "logout() returned an error" and `who` shows nothing. The `utmp`
fixture creates the empty file (root:utmp, 0664) when it is missing, and removes it again.
"""

from __future__ import annotations

import asyncio
import contextlib
import grp
import os
import shutil
import subprocess
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncssh
import pytest

from services.shared.config import HostConfig, SshSettings, ViolationSettings
from services.violations.actions.base import Alert, Process
from services.violations.actions.message import terminal_text
from services.violations.actions.remote import SshHostShell
from services.violations.actions.signals import kill, terminate
from services.violations.actions.terminal import notify_terminals
from services.violations.scripts import parse_who, who_command
from tests.support.polling import until
from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser, throwaway_user

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0, reason="creating a Unix user for the offender needs root"
)

UTMP = Path("/run/utmp")
GRACE_S = 0.5
DEADLINE_S = 10.0


@pytest.fixture
def utmp() -> Iterator[None]:
    """/run/utmp, so that sshd can record terminal sessions for `who` (see the module doc)."""
    created = False
    if not UTMP.exists():
        UTMP.touch(mode=0o664)
        with contextlib.suppress(KeyError):
            os.chown(UTMP, 0, grp.getgrnam("utmp").gr_gid)
        UTMP.chmod(0o664)
        created = True
    try:
        yield
    finally:
        if created:
            UTMP.unlink(missing_ok=True)


@dataclass
class Setup:
    sshd: Sshd
    user: UnixUser
    host: HostConfig
    shell: SshHostShell

    def settings(self, act_as: str) -> ViolationSettings:
        return ViolationSettings(act_as=act_as, terminal_as="act_as", term_grace_s=GRACE_S)

    def alert(self, *processes: Process) -> Alert:
        now = datetime.now(UTC)
        return Alert(
            incident_id="inc-sshd",
            host=self.host.name,
            gpu_uuid="GPU-sshd",
            gpu_index=0,
            offender=self.user.name,
            processes=processes,
            since=now,
            owner="someone-else",
            reservation_end=now + timedelta(hours=1),
            step="0s terminal offender",
            next_step="300s terminate",
            next_at=now + timedelta(minutes=5),
        )


@pytest.fixture
def setup(sshd: Sshd, unix_user: UnixUser, utmp: None) -> Setup:
    ssh = SshSettings(
        known_hosts=str(sshd.known_hosts), connect_timeout_s=10.0, key_file=str(sshd.client_key)
    )
    return Setup(
        sshd,
        unix_user,
        sshd.host_config("gpu-sshd"),  # management user: the one running the tests
        SshHostShell(ssh),
    )


ACT_AS = [
    "offender",
    pytest.param(
        "management",
        marks=pytest.mark.skipif(
            shutil.which("sudo") is None,
            reason="sudo is not installed: act_as management runs `sudo -n` on the host",
        ),
    ),
]


@contextlib.asynccontextmanager
async def terminal_session(setup: Setup) -> AsyncIterator[asyncssh.SSHClientProcess[str]]:
    """The offender logged in with a terminal (a pty), running `sleep 60`."""
    async with asyncssh.connect(
        setup.sshd.host,
        port=setup.sshd.port,
        username=setup.user.name,
        client_keys=[str(setup.sshd.client_key)],
        known_hosts=str(setup.sshd.known_hosts),
        agent_path=None,
        config=None,
    ) as conn:
        process = await conn.create_process("sleep 60", term_type="xterm")
        try:
            yield process
        finally:
            process.close()


async def wait_for_session(setup: Setup) -> str:
    """The offender's tty once `who` lists it."""
    listed = ""

    async def tty() -> str | None:
        nonlocal listed
        listed = (await setup.shell.run(setup.host, setup.user.name, who_command())).stdout
        ttys = [s.tty for s in parse_who(listed) if s.user == setup.user.name]
        return ttys[0] if ttys else None

    return await until(
        tty,
        f"`who` listing the pty session of {setup.user.name}",
        DEADLINE_S,
        report=lambda: f"`who`: {listed!r}; sshd's log:\n{setup.sshd.log()[-2000:]}",
    )


@pytest.mark.parametrize("act_as", ACT_AS)
async def test_notify_writes_to_the_offenders_real_terminal(setup: Setup, act_as: str) -> None:
    async with terminal_session(setup) as session:
        tty = await wait_for_session(setup)
        assert tty.startswith("pts/")
        alert = setup.alert(Process(pid=4242, command="python train.py"))
        outcomes = await notify_terminals(setup.shell, setup.host, alert, setup.settings(act_as))
        assert [(o.target, o.ok) for o in outcomes] == [(f"gpu-sshd:{tty}", True)], outcomes
        expected = terminal_text(alert)
        seen = ""
        async with asyncio.timeout(DEADLINE_S):
            # The terminal adds a CR before each LF (onlcr): the notice already has one.
            while expected not in seen.replace("\r\r\n", "\r\n"):
                chunk = await session.stdout.read(4096)
                assert chunk, f"the session ended before the notice arrived: {seen!r}"
                seen += chunk


async def read_until(session: asyncssh.SSHClientProcess[str], expected: str) -> None:
    seen = ""
    async with asyncio.timeout(DEADLINE_S):
        # The terminal adds a CR before each LF (onlcr): the notice already has one.
        while expected not in seen.replace("\r\r\n", "\r\n"):
            chunk = await session.stdout.read(4096)
            assert chunk, f"the session ended before the notice arrived: {seen!r}"
            seen += chunk


@pytest.fixture(params=[True, False], ids=["in-group-tty", "not-in-group-tty"])
def manager(request: pytest.FixtureRequest) -> Iterator[tuple[UnixUser, bool]]:
    """An unprivileged management user of the host, in group tty or not."""
    with throwaway_user() as user:
        if request.param:
            subprocess.run(["usermod", "-aG", "tty", user.name], check=True, timeout=30)
        yield user, request.param


async def test_by_default_the_management_user_in_group_tty_writes_the_notice(
    setup: Setup, manager: tuple[UnixUser, bool]
) -> None:
    """No sudo, no login as the offender (whose authorized_keys a squatter never changes): an
    unprivileged management user in group tty writes to the offender's real pts."""
    user, in_group_tty = manager
    host = setup.sshd.host_config("gpu-sshd", user=user.name)
    async with terminal_session(setup) as session:
        tty = await wait_for_session(setup)
        alert = setup.alert(Process(pid=4242, command="python train.py"))
        outcomes = await notify_terminals(setup.shell, host, alert, ViolationSettings())
        if in_group_tty:
            assert [(o.target, o.ok) for o in outcomes] == [(f"gpu-sshd:{tty}", True)]
            await read_until(session, terminal_text(alert))
        else:
            [outcome] = outcomes
            assert not outcome.ok
            assert f"is {user.name} in group tty on gpu-sshd?" in outcome.detail


async def test_notify_without_a_terminal_session(setup: Setup) -> None:
    alert = setup.alert(Process(pid=4242, command="python train.py"))
    outcomes = await notify_terminals(setup.shell, setup.host, alert, setup.settings("offender"))
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        ("gpu-sshd", False, f"no terminal session of {setup.user.name} on gpu-sshd")
    ]


@pytest.mark.parametrize("act_as", ACT_AS)
async def test_kill_ends_the_process(setup: Setup, act_as: str) -> None:
    process, started = setup.user.start("sleep", "300")
    alert = setup.alert(Process(pid=process.pid, command="sleep 300", started_at=started))
    outcomes = await kill(setup.shell, setup.host, alert, setup.settings(act_as))
    assert [(o.target, o.ok, o.detail) for o in outcomes] == [
        (f"gpu-sshd:pid {process.pid}", True, "killed")
    ]
    assert process.wait(DEADLINE_S) == -9


@pytest.mark.parametrize("act_as", ACT_AS)
async def test_terminate_ends_one_and_kills_one_that_ignores_sigterm(
    setup: Setup, act_as: str
) -> None:
    polite, polite_start = setup.user.start("sleep", "300")
    stubborn, stubborn_start = setup.user.start("sh", "-c", "trap '' TERM; exec sleep 301")
    alert = setup.alert(
        Process(pid=polite.pid, command="sleep 300", started_at=polite_start),
        Process(pid=stubborn.pid, command="sleep 301", started_at=stubborn_start),
    )
    outcomes = await terminate(setup.shell, setup.host, alert, setup.settings(act_as))
    assert [(o.ok, o.detail) for o in outcomes] == [
        (True, "terminated"),
        (True, "killed after SIGTERM was ignored"),
    ]
    assert polite.wait(DEADLINE_S) == -15
    assert stubborn.wait(DEADLINE_S) == -9


@pytest.mark.parametrize("act_as", ACT_AS)
async def test_a_mismatched_or_unknown_start_leaves_the_process_alive(
    setup: Setup, act_as: str
) -> None:
    process, started = setup.user.start("sleep", "300")
    for started_at in (started - timedelta(minutes=1), started + timedelta(seconds=30), None):
        alert = setup.alert(Process(pid=process.pid, command="sleep 300", started_at=started_at))
        for outcomes in (
            await kill(setup.shell, setup.host, alert, setup.settings(act_as)),
            await terminate(setup.shell, setup.host, alert, setup.settings(act_as)),
        ):
            assert [o.ok for o in outcomes] == [False], outcomes
            detail = outcomes[0].detail
            if started_at is None:
                assert detail.startswith("not killed: the start time of pid"), detail
            else:
                assert detail.startswith(
                    f"not killed: pid {process.pid} now belongs to another process of "
                    f"{setup.user.name}"
                ), detail
    await asyncio.sleep(GRACE_S)
    assert process.poll() is None
