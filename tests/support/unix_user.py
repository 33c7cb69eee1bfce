"""A throwaway unprivileged Unix user (fixture `unix_user`), for tests where someone other than
the one running the tests logs in over SSH or owns processes. Creating it needs root.

The user gets a home and bash, and password "*": none can be used, yet the account is not
locked ("!"), which sshd (without PAM) would refuse for every kind of login. Afterwards its
processes (each by pid), its screen and tmux sockets and the account with its home are gone.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import signal
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.support.polling import until_sync
from tests.support.processes import ps_row

START_TIMEOUT_S = 10.0
SCREEN_DIR = Path("/run/screen")


@dataclass
class UnixUser:
    name: str
    uid: int
    gid: int
    home: Path
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def spawn(self, *argv: str) -> subprocess.Popen[bytes]:
        """`argv` as this user, leading its own process group."""
        process = subprocess.Popen(
            list(argv),
            user=self.uid,
            group=self.gid,
            extra_groups=[],
            cwd="/",
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        self.processes.append(process)
        return process

    def start(self, *argv: str) -> tuple[subprocess.Popen[bytes], datetime]:
        """`spawn`, once `ps` shows it run as this user (until the exec it shows the fork,
        still root's); with its start time as the monitor computes it (host clock minus `ps`'s
        etimes)."""
        process = self.spawn(*argv)

        def started_at() -> datetime | None:
            row = ps_row(process.pid, "user:64=,etimes=,args=")
            # (procps can print a wrapped, huge etimes for a process forked a moment ago.)
            if row and row[0] == self.name and row[2] != "python" and int(row[1]) < 86400:
                return datetime.fromtimestamp(int(time.time()) - int(row[1]), UTC)
            return None

        started = until_sync(
            started_at, f"{argv} running as {self.name}", START_TIMEOUT_S, interval=0.01
        )
        return process, started


def _pids_of(uid: int) -> list[int]:
    rows = subprocess.run(
        ["ps", "-o", "pid=", "-u", str(uid)], capture_output=True, text=True, check=False
    ).stdout.split()
    return [int(pid) for pid in rows]


@contextlib.contextmanager
def throwaway_user() -> Iterator[UnixUser]:
    """A fresh Unix user, removed afterwards with everything it left running."""
    if shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("useradd/userdel not installed")
    name = f"wt{uuid.uuid4().hex[:10]}"
    _account_command(["useradd", "--create-home", "--shell", "/bin/bash", "--password", "*", name])
    entry = pwd.getpwnam(name)
    user = UnixUser(name, entry.pw_uid, entry.pw_gid, Path(entry.pw_dir))
    try:
        yield user
    finally:
        for process in user.processes:  # what the test started, by pid
            if process.poll() is None:
                process.kill()
            process.wait(START_TIMEOUT_S)
        for _round in range(5):  # what runs through its logins: screen, tmux, their tasks
            pids = _pids_of(user.uid)
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        shutil.rmtree(SCREEN_DIR / f"S-{name}", ignore_errors=True)
        shutil.rmtree(f"/tmp/tmux-{user.uid}", ignore_errors=True)
        _account_command(["userdel", "--remove", name], check=False)


# useradd and userdel exit 10 when another process holds /etc/passwd's lock: tests in two
# pytest-xdist workers make and remove users at the same time, so they wait their turn.
_PASSWD_BUSY = 10


def _account_command(argv: list[str], *, check: bool = True) -> None:
    for _attempt in range(50):
        done = subprocess.run(argv, capture_output=True, timeout=30)
        if done.returncode != _PASSWD_BUSY:
            break
        time.sleep(0.1)
    if check and done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, argv, done.stdout, done.stderr)
