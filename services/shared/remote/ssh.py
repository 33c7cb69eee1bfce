"""Shells on remote hosts: one persistent SSH connection per host, a deadline on every command.

The one SSH layer of every service that logs in to hosts (monitor, jobs, violations), read
from the `[ssh]` settings: `SshOptions` (known_hosts, host-key policy, timeouts, keep-alive,
Warden's key for logging in as users), `HostShell` the small interface commands run through
(in `shell.py`, pure, with `CommandResult` and `HostUnreachable`; imported here too),
`SshHostShell` its asyncssh implementation and `FakeHostShell` (beside it) one that answers
from a table for unit tests. A command that cannot be run raises `HostUnreachable` with a
reason a person can act on ("authentication refused", "host key not verified", "timed
out", ...). `public_key_line` is the key users put into their authorized_keys.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import shlex
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from services.shared.config import HostConfig, Settings, SshSettings
from services.shared.errors import ConfigError
from services.shared.remote.shell import (
    HOST_KEY_CHANGED,
    CommandResult,
    HostShell,
    HostUnreachable,
)

log = logging.getLogger("warden.ssh")


# --- SSH ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SshOptions:
    connect_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    known_hosts: str = ""  # empty: ~/.ssh/known_hosts
    accept_new_host_keys: bool = False
    key_file: str = ""  # Warden's key for logging in as users; empty: the host's key_file

    @classmethod
    def from_settings(cls, settings: SshSettings) -> SshOptions:
        return cls(
            connect_timeout_s=settings.connect_timeout_s,
            keepalive_s=settings.keepalive_s,
            known_hosts=settings.known_hosts,
            accept_new_host_keys=settings.accept_new_host_keys,
            key_file=settings.key_file,
        )

    def known_hosts_path(self) -> Path:
        return Path(self.known_hosts or "~/.ssh/known_hosts").expanduser()

    def key_file_for(self, host: HostConfig, login: str) -> str:
        """The host's key for its management user, Warden's user key (if set) for anyone else."""
        if login == host.user:
            return host.key_file
        return self.key_file or host.key_file

    def as_login(self, host: HostConfig, login: str) -> HostConfig:
        """`host` as `login` logs in to it: that user, with the key for that user."""
        return dataclasses.replace(host, user=login, key_file=self.key_file_for(host, login))


def describe_ssh_error(err: BaseException, host: str = "") -> str:
    """Words for why a connection or command failed, for logs, events and `hosts check`;
    `host` names the host in the advice on accepting its key."""
    if isinstance(err, asyncssh.PermissionDenied):
        return "authentication refused (is Warden's public key in authorized_keys?)"
    if isinstance(err, asyncssh.HostKeyNotVerifiable):
        how = f"`warden hosts check {host}`" if host else "`warden hosts check NAME`"
        return (
            f"host key not verified: check the key and accept it with {how} or on the "
            "Hosts page (or add it to known_hosts, or set ssh.accept_new_host_keys = true)"
        )
    if isinstance(err, TimeoutError | asyncio.TimeoutError):
        return "timed out"
    if isinstance(err, ConnectionRefusedError):
        return "connection refused"
    if isinstance(err, asyncssh.ConnectionLost):
        return "connection lost"
    if isinstance(err, asyncssh.DisconnectError):
        return f"disconnected: {err.reason}"
    if isinstance(err, asyncssh.ChannelOpenError) and err.code == asyncssh.OPEN_CONNECT_FAILED:
        return "connection lost"  # a command on a connection that closed meanwhile
    if isinstance(err, asyncssh.KeyImportError | FileNotFoundError):
        return f"cannot read the SSH key: {err}"
    if isinstance(err, OSError):
        return err.strerror or str(err) or type(err).__name__
    return str(err) or type(err).__name__


def host_key_changed(host: str) -> str:
    """Why a host whose key is not the one trusted for it is not logged in to."""
    return (
        f"{HOST_KEY_CHANGED}: {host} presents a key other than the one trusted for it, so Warden "
        "does not log in (someone may be in between: a man-in-the-middle). If the host was "
        "reinstalled, compare the key `warden hosts check "
        f"{host}` shows with `ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub` on the host "
        "before accepting it"
    )


def needs_a_person(err: BaseException) -> bool:
    """A failure that retrying will not mend (a refused key, an unknown host key, an unreadable
    key file), unlike a host that is down, hung or restarting."""
    return isinstance(
        err,
        asyncssh.PermissionDenied
        | asyncssh.HostKeyNotVerifiable
        | asyncssh.KeyImportError
        | FileNotFoundError,
    )


PREFERRED_CIPHERS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes256-ctr",
    "chacha20-poly1305@openssh.com",
)


# Parsed known_hosts files by path, with the (mtime, size) they were read at. Given a path,
# asyncssh re-reads and re-parses the whole file on every connection: with one line per host
# that is O(hosts) per connect, O(hosts^2) for the fleet (11 ms per connect at 1,000 hosts,
# measured by bench/monitor_scale.py).
_KNOWN_HOSTS: dict[Path, tuple[tuple[int, int], asyncssh.SSHKnownHosts]] = {}


def load_known_hosts(path: Path) -> asyncssh.SSHKnownHosts | None:
    """The parsed known_hosts at `path`, read again only when the file changed; None if absent."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return None
    version = (stat.st_mtime_ns, stat.st_size)
    cached = _KNOWN_HOSTS.get(path)
    if cached is None or cached[0] != version:
        cached = _KNOWN_HOSTS[path] = (version, asyncssh.read_known_hosts(str(path)))
    return cached[1]


def _known_host_pattern(address: str, port: int) -> str:
    return address if port == 22 else f"[{address}]:{port}"


def trusted_host_keys(host: HostConfig, options: SshOptions) -> list[asyncssh.SSHKey]:
    """The keys `host` may present: its accepted `host_key` when it has one (only that),
    else those [ssh] known_hosts holds for its address and port. KeyImportError for a
    `host_key` that is no public key."""
    if host.host_key:
        return [asyncssh.import_public_key(host.host_key)]
    known = load_known_hosts(options.known_hosts_path())
    if known is None:
        return []
    trusted, *_ = known.match(host.address, "", host.port)
    return list(trusted)


def key_line(key: asyncssh.SSHKey) -> str:
    """`ssh-ed25519 AAAA...`: the key as known_hosts and `host_key` hold it (no comment)."""
    return " ".join(key.export_public_key("openssh").decode().split()[:2])


class _NoTurn(Exception):
    """The deadline passed while a shell waited for its turn to open its connection."""


class SshHostShell(HostShell):
    def __init__(
        self,
        host: HostConfig,
        options: SshOptions,
        *,
        handshakes: asyncio.Semaphore | None = None,
    ) -> None:
        self.name = host.name
        self.host = host
        self.options = options
        # Shared by the shells of one process to cap the handshakes it runs at once: past a
        # few, more only slow every one of them down (CPU), until they time out and start over.
        self._handshakes = handshakes
        self._client_keys = [str(Path(host.key_file).expanduser())] if host.key_file else ()
        self._connection: asyncssh.SSHClientConnection | None = None
        self._connecting = asyncio.Lock()

    async def _connect(self) -> asyncssh.SSHClientConnection:
        known_hosts_path = self.options.known_hosts_path()
        # A missing file trusts no key: asyncssh would read an empty value as "use
        # ~/.ssh/known_hosts", silently trusting keys the configured file does not hold.
        parsed = load_known_hosts(known_hosts_path)
        known_hosts: object = parsed if parsed is not None else ([], [], [])
        record_key = False
        if self.host.host_key:
            # The key accepted for this host (through `warden hosts check` or the Hosts
            # page) is the only one it may present; known_hosts is not consulted.
            known_hosts = ([asyncssh.import_public_key(self.host.host_key)], [], [])
        elif self.options.accept_new_host_keys and not self._key_is_known(known_hosts_path):
            known_hosts, record_key = None, True  # first contact: accept, then record
        connection = await asyncssh.connect(
            self.host.address,
            port=self.host.port,
            username=self.host.user,
            client_keys=self._client_keys,
            known_hosts=known_hosts,
            keepalive_interval=self.options.keepalive_s,
            keepalive_count_max=3,
            connect_timeout=self.options.connect_timeout_s,
            agent_path=None if self.host.key_file else (),
            # AES-GCM first: asyncssh's chacha20 costs about twice the CPU per poll.
            encryption_algs=PREFERRED_CIPHERS,
        )
        if record_key:
            self._record_key(known_hosts_path, connection)
        return connection

    def _key_is_known(self, path: Path) -> bool:
        known = load_known_hosts(path)
        if known is None:
            return False
        trusted, *_ = known.match(self.host.address, "", self.host.port)
        return bool(trusted)

    def _trusts_a_key(self) -> bool:
        """Whether some key is trusted for this host (one it does not present: "changed")."""
        return bool(self.host.host_key) or self._key_is_known(self.options.known_hosts_path())

    def _record_key(self, path: Path, connection: asyncssh.SSHClientConnection) -> None:
        key = connection.get_server_host_key()
        if key is None:
            return
        line = f"{_known_host_pattern(self.host.address, self.host.port)} "
        line += key.export_public_key("openssh").decode().strip()
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a") as known_hosts:
            known_hosts.write(line + "\n")
        log.info("recorded the host key of %s in %s", self.name, path)

    async def _connection_within(self, deadline: float) -> asyncssh.SSHClientConnection:
        async with self._connecting:
            if self._connection is not None and self._connection.is_closed():
                # Closed while idle (keep-alives unanswered, the host restarted): a new one,
                # rather than a command that fails on the old one.
                self._connection = None
            if self._connection is None:
                async with self._handshake_turn(deadline):
                    async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                        self._connection = await self._connect()
            return self._connection

    @contextlib.asynccontextmanager
    async def _handshake_turn(self, deadline: float) -> AsyncIterator[None]:
        """This shell's turn among the handshakes of its process; `_NoTurn` at the deadline."""
        if self._handshakes is None:
            yield
            return
        try:
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                await self._handshakes.acquire()
        except TimeoutError as err:
            raise _NoTurn from err
        try:
            yield
        finally:
            self._handshakes.release()

    @property
    def connected(self) -> bool:
        return self._connection is not None and not self._connection.is_closed()

    async def connect(self, timeout: float) -> None:
        async with self._failing_as_unreachable():
            await self._connection_within(time.monotonic() + timeout)

    async def run(self, command: str, timeout: float) -> CommandResult:
        deadline = time.monotonic() + timeout
        async with self._failing_as_unreachable():
            connection = await self._connection_within(deadline)
            async with asyncio.timeout(max(0.0, deadline - time.monotonic())):
                # Bytes, decoded here: output may cut a UTF-8 character (a log's tail) or hold
                # bytes that are no text; asyncssh's strict decoding would drop the connection.
                done = await connection.run(command, check=False, encoding=None)
        return CommandResult(done.exit_status, _text(done.stdout), _text(done.stderr))

    @contextlib.asynccontextmanager
    async def _failing_as_unreachable(self) -> AsyncIterator[None]:
        """What fails on the way to the host, as HostUnreachable with a reason to act on."""
        try:
            yield
        except _NoTurn as err:
            # Not tried: nothing is known of the host. `waiting` tells a caller (the monitor)
            # that this is no failure of the host's.
            reason = "not tried: waiting for a turn among the SSH handshakes"
            raise HostUnreachable(
                f"{self.name}: {reason}", {"host": self.name, "reason": reason, "waiting": True}
            ) from err
        except (OSError, asyncssh.Error, asyncssh.KeyImportError, TimeoutError) as err:
            # A broken or hung connection is dropped; the next poll connects again.
            await self.close()
            details = {"host": self.name, "needs_a_person": needs_a_person(err)}
            if isinstance(err, asyncssh.HostKeyNotVerifiable) and self._trusts_a_key():
                details.update(reason=host_key_changed(self.name), host_key="changed")
            else:
                details["reason"] = describe_ssh_error(err, self.name)
            raise HostUnreachable(f"{self.name}: {details['reason']}", details) from err

    async def close(self) -> None:
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()
            try:
                async with asyncio.timeout(2):
                    await connection.wait_closed()
            except (TimeoutError, OSError, asyncssh.Error):
                pass


def _text(output: object) -> str:
    if isinstance(output, bytes):
        return output.decode(errors="replace")
    return output if isinstance(output, str) else ""


# --- the public key users authorize ----------------------------------------------------------


def public_key_line(settings: Settings) -> str:
    """The OpenSSH public key line (`ssh-ed25519 AAAA... comment`) that each user puts into
    ~/.ssh/authorized_keys for jobs and terminal notices: of ssh.key_file (which defaults to the
    key `warden init` makes in the data directory), or else of the first host's key_file.
    """
    key_file = settings.ssh.key_file
    setting = "ssh.key_file"
    if not key_file:
        key_file = next((h.key_file for h in settings.hosts if h.key_file), "")
        setting = "hosts.key_file"
    if not key_file:
        raise ConfigError(
            "no SSH key for logging in as users: `warden init` makes one in the data directory, "
            "or set ssh.key_file",
            {"ssh.key_file": "not set, and no host has a key_file"},
        )
    path = Path(key_file).expanduser()
    public = path.with_name(path.name + ".pub")
    try:
        if public.is_file():
            line = public.read_text().strip()
            if line:
                return line.splitlines()[0]
        key = asyncssh.read_private_key(str(path))
        return key.export_public_key("openssh").decode().strip()
    except (OSError, asyncssh.KeyImportError) as err:
        reason = f"cannot read the SSH key {path}: {getattr(err, 'strerror', None) or err}"
        raise ConfigError(reason, {setting: reason}) from err


def authorize_command(line: str) -> str:
    """One shell command that adds the public key `line` to the caller's authorized_keys (the
    line is quoted: a key comment may hold any character)."""
    return (
        "mkdir -p ~/.ssh && chmod 700 ~/.ssh && "
        f"echo {shlex.quote(line)} >> ~/.ssh/authorized_keys && chmod 600 ~/.ssh/authorized_keys"
    )


# --- fake --------------------------------------------------------------------------------------


@dataclass
class FakeHostShell(HostShell):
    """Answers commands with a function of the command; records what it was asked.

    `answer` returns a CommandResult, or raises HostUnreachable to act as a dead host.
    """

    name: str
    answer: Callable[[str], CommandResult]
    commands: list[str] = field(default_factory=list)
    closed: int = 0

    async def run(self, command: str, timeout: float) -> CommandResult:
        self.commands.append(command)
        return self.answer(command)

    async def close(self) -> None:
        self.closed += 1
