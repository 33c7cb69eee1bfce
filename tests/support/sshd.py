"""A real OpenSSH sshd on a free loopback port, for integration tests.

`Sshd` writes everything it needs into its own temporary directory (a fresh ed25519 host key,
a client key pair, `authorized_keys`, `known_hosts`, `sshd_config`, the log) and never reads or
writes the real `~/.ssh`. It runs `/usr/sbin/sshd -D -e -f <config>` as a child process::

    with Sshd() as sshd:                      # or `async with`, or the `sshd` fixture
        host = sshd.host_config("gpu1")        # HostConfig for Warden (address, port, user, key)
        options = SshOptions(known_hosts=str(sshd.known_hosts))
        sshd.fake_smi("gpus.csv", rows)        # what tests/fixtures/bin/nvidia-smi answers
        ...
        sshd.stop()                            # the host goes down: connections drop too
        sshd.start()                           # back up, same port and keys

Commands run through the user's login shell with `PATH` starting with `tests/fixtures/bin`
(the fake nvidia-smi) and `WARDEN_FAKE_SMI_DIR` pointing at `fake_smi_dir`: both are set with
`SetEnv` in sshd_config, which sshd applies last, after its own default PATH (OpenSSH >= 8.7).
A login shell's rc files may still prepend to PATH (bash reads ~/.bashrc for ssh commands),
never replace it.

`user` defaults to the user running the tests; another user (created by the test) can log in
when the tests run as root: the directory is world-readable except for the private keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import pwd
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any

import pytest

from services.shared.config import HostConfig
from tests.support.ports import free_port

SSHD = "/usr/sbin/sshd"
SSH_KEYGEN = "ssh-keygen"
FAKE_BIN = Path(__file__).resolve().parents[1] / "fixtures" / "bin"
START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 5.0


def generate_key(path: Path, comment: str = "warden-test") -> str:
    """Write an ed25519 key pair at `path` (and `path`.pub); return the public key line."""
    keygen = shutil.which(SSH_KEYGEN)
    if keygen is None:
        pytest.fail("ssh-keygen not found: install openssh-client (.ci/run does)", pytrace=False)
    for old in (path, path.with_name(path.name + ".pub")):
        old.unlink(missing_ok=True)
    subprocess.run(
        [keygen, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return public_key_line(path.with_name(path.name + ".pub"))


def public_key_line(path: Path) -> str:
    """`ssh-ed25519 AAAA...` from a .pub file, without the comment."""
    algorithm, data = path.read_text().split()[:2]
    return f"{algorithm} {data}"


@functools.cache
def _openssh_version() -> tuple[int, int]:
    done = subprocess.run([SSHD, "-V"], capture_output=True, text=True, timeout=30)
    found = re.search(r"OpenSSH_(\d+)\.(\d+)", done.stdout + done.stderr)
    return (int(found[1]), int(found[2])) if found else (0, 0)


def _quote(word: str) -> str:
    """One sshd_config argument (double quotes when it holds blanks)."""
    if any(c in word for c in '"\n'):
        raise ValueError(f"cannot put {word!r} into sshd_config")
    return f'"{word}"' if any(c.isspace() for c in word) or not word else word


def _children() -> dict[int, list[int]]:
    """Parent pid -> child pids, from /proc."""
    tree: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as stat:
                ppid = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        tree.setdefault(ppid, []).append(int(entry))
    return tree


def _descendants(pid: int) -> set[int]:
    tree = _children()
    found: set[int] = set()
    todo = list(tree.get(pid, ()))
    while todo:
        child = todo.pop()
        if child not in found:
            found.add(child)
            todo.extend(tree.get(child, ()))
    return found


class Sshd:
    """One sshd for one test. See the module docstring."""

    host = "127.0.0.1"

    def __init__(
        self,
        *,
        user: str | None = None,
        port: int = 0,
        path: str | None = None,
        env: Mapping[str, str] | None = None,
        extra_config: Sequence[str] = (),
        directory: str | os.PathLike[str] | None = None,
    ) -> None:
        """`path`: PATH of the commands (default: fixtures/bin, then the usual directories);
        `env`: more variables set with SetEnv; `extra_config`: more sshd_config lines;
        `directory`: where the files go (default: a new temporary directory, removed on close).
        """
        if not os.path.exists(SSHD):
            pytest.fail(f"{SSHD} not found: install openssh-server (.ci/run does)", pytrace=False)
        self.user = user or pwd.getpwuid(os.getuid()).pw_name
        self.port = port
        self._fixed_port = bool(port)
        self.path = path or f"{FAKE_BIN}:/usr/local/bin:/usr/bin:/bin"
        self.env = dict(env or {})
        self.extra_config = list(extra_config)
        self._owns_directory = directory is None
        self.directory = Path(directory or tempfile.mkdtemp(prefix="warden-sshd-"))
        self.directory.mkdir(parents=True, exist_ok=True)
        self.directory.chmod(0o755)  # another login user must reach authorized_keys
        self.host_key = self.directory / "ssh_host_ed25519_key"
        self.client_key = self.directory / "client_ed25519"
        self.authorized_keys = self.directory / "authorized_keys"
        self.known_hosts = self.directory / "known_hosts"
        self.config_file = self.directory / "sshd_config"
        self.pid_file = self.directory / "sshd.pid"
        self.log_file = self.directory / "sshd.log"
        self.fake_smi_dir = self.directory / "fake-smi"
        self.fake_smi_dir.mkdir(exist_ok=True)
        self.fake_smi_dir.chmod(0o755)
        self.host_public_key = generate_key(self.host_key, "warden-test-host")
        self.client_public_key = generate_key(self.client_key, "warden-test-client")
        self.authorized_keys.write_text(self.client_public_key + "\n")
        self.authorized_keys.chmod(0o644)
        self.known_hosts.write_text("")
        self._process: subprocess.Popen[bytes] | None = None

    # -- what clients need ----------------------------------------------------------------

    @property
    def known_hosts_line(self) -> str:
        """`[127.0.0.1]:PORT ssh-ed25519 AAAA...` (the port is chosen by `start`)."""
        return f"[{self.host}]:{self.port} {self.host_public_key}"

    def host_config(self, name: str = "sshd", **changes: Any) -> HostConfig:
        """Warden's entry for this host: address, port, user and the client key."""
        values: dict[str, Any] = {
            "name": name,
            "address": self.host,
            "port": self.port,
            "user": self.user,
            "key_file": str(self.client_key),
        }
        values.update(changes)
        return HostConfig(**values)

    def authorize(self, public_key: str) -> None:
        """Accept one more client key (an `ssh-ed25519 AAAA...` line) from now on."""
        with self.authorized_keys.open("a") as keys:
            keys.write(public_key.strip() + "\n")

    def fake_smi(self, name: str, content: str | None) -> None:
        """Write (None: remove) one file the fake nvidia-smi reads: gpus.csv, apps.rc, ..."""
        target = self.fake_smi_dir / name
        if content is None:
            target.unlink(missing_ok=True)
        else:
            target.write_text(content)
            target.chmod(0o644)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def accepted_logins(self) -> int:
        """How many connections authenticated so far (`Accepted publickey` lines)."""
        return self.log().count("Accepted publickey for ")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    # -- lifecycle ------------------------------------------------------------------------

    def _write_config(self) -> None:
        setenv = [f"PATH={self.path}", f"WARDEN_FAKE_SMI_DIR={self.fake_smi_dir}"]
        setenv += [f"{key}={value}" for key, value in self.env.items()]
        lines = [
            f"Port {self.port}",
            f"ListenAddress {self.host}",
            f"HostKey {self.host_key}",
            f"PidFile {self.pid_file}",
            f"AuthorizedKeysFile {self.authorized_keys}",
            "PubkeyAuthentication yes",
            "PasswordAuthentication no",
            "KbdInteractiveAuthentication no",
            "UsePAM no",
            "StrictModes no",
            "PermitRootLogin prohibit-password",
            # Only the first SetEnv line counts: every variable goes on this one.
            "SetEnv " + " ".join(_quote(item) for item in setenv),
            "Subsystem sftp internal-sftp",
            "LogLevel VERBOSE",
            "PrintMotd no",
            "X11Forwarding no",
            "MaxStartups 100:30:200",
        ]
        if _openssh_version() >= (9, 8):
            lines.append("PerSourcePenalties no")  # failed logins must not lock out the next test
        self.config_file.write_text("\n".join([*lines, *self.extra_config]) + "\n")

    def start(self) -> Sshd:
        """Start sshd (again: same port and keys) and wait until it listens."""
        if self.running:
            return self
        if os.geteuid() == 0:
            os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privilege separation dir
        for _attempt in range(5):
            if not self._fixed_port:
                self.port = free_port(self.host)
            self._write_config()
            if self._spawn():
                self._fixed_port = True  # a restart comes back on the same port
                self.known_hosts.write_text(self.known_hosts_line + "\n")
                return self
            if self._fixed_port:
                break
        pytest.fail(f"sshd did not start; its log:\n{self.log()[-4000:]}", pytrace=False)

    def _spawn(self) -> bool:
        """Run sshd; True once it listens, False when it exited (port taken, bad config)."""
        mark = f"Server listening on {self.host} port {self.port}."
        already = self.log().count(mark)
        with self.log_file.open("ab") as log_file:
            self._process = subprocess.Popen(
                [SSHD, "-D", "-e", "-f", str(self.config_file)],
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.log().count(mark) > already:
                return True
            if self._process.poll() is not None:
                self._process = None
                return False
            time.sleep(0.02)
        self.stop()
        pytest.fail(
            f"sshd did not listen within {START_TIMEOUT_S:g}s; its log:\n{self.log()[-4000:]}",
            pytrace=False,
        )

    def stop(self, *, drop_connections: bool = True) -> None:
        """Stop listening; with `drop_connections` (the default), end every connection too,
        as when the host goes down (sshd alone leaves its per-connection processes running).
        """
        process, self._process = self._process, None
        if process is None:
            return
        frozen: set[int] = set()
        if drop_connections and process.poll() is None:
            # Freeze the whole tree first so nothing forks or escapes while it is killed.
            for _round in range(20):
                found = _descendants(process.pid) - frozen
                if not found:
                    break
                for pid in found:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(pid, signal.SIGSTOP)
                frozen |= found
            for pid in frozen:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP_TIMEOUT_S)
        self.pid_file.unlink(missing_ok=True)

    def close(self) -> None:
        """Stop sshd and remove the directory it made."""
        self.stop()
        if self._owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    async def astart(self) -> Sshd:
        """`start` without blocking the event loop."""
        return await asyncio.to_thread(self.start)

    async def astop(self, *, drop_connections: bool = True) -> None:
        await asyncio.to_thread(self.stop, drop_connections=drop_connections)

    def __enter__(self) -> Sshd:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    async def __aenter__(self) -> Sshd:
        try:
            return await self.astart()
        except BaseException:
            self.close()
            raise

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
