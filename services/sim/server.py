"""The simulated fleet over real SSH: one asyncssh listener per host, all in one event loop.

Each host listens on its own port of 127.0.0.1 (`base_port + i`, or free ports when
`base_port` is 0) with one shared ed25519 host key. Clients authenticate with a public key
from `authorized_keys` (or any key with `accept_any_key=True`, for the demo), under any user
name. An exec request runs `SimFleet.run_command` as that user: the probe, the `warden hosts
check` commands, the violation actions' scripts (who, write to a terminal, signal a process),
the jobs' task scripts (start, status, signal, log: that user's own tasks), and "sim:
unsupported command" (exit 127) for anything else; no shell, no pty, no subsystem.

Per request the server does one table look-up, renders the host's text and writes it: the
key exchange happens once per connection (clients keep one connection per host), so the
cost of a poll is the SSH channel round trip plus the rendering.

Scripted failures act on the wire: a host set down stops listening (new connections are
refused) and drops its connections; a hung host accepts the command and answers after the
delay, or never.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
from collections.abc import Iterable
from pathlib import Path
from types import TracebackType
from typing import Any

import asyncssh

from services.sim.model import SimEvent, SimFleet

KEY_ALGORITHM = "ssh-ed25519"
# The only ciphers offered (clients pick the first of their list the server offers, and
# OpenSSH and asyncssh both list chacha20-poly1305 first): asyncssh's AES-GCM costs a fraction
# of its chacha20-poly1305 per packet, and every current client speaks it.
ENCRYPTION_ALGS = (
    "aes128-gcm@openssh.com",
    "aes256-gcm@openssh.com",
    "aes128-ctr",
    "aes192-ctr",
    "aes256-ctr",
)


def public_key_text(key: asyncssh.SSHKey) -> str:
    """`ssh-ed25519 AAAA...` (no comment) for known_hosts and authorized_keys lines."""
    algorithm, data = key.export_public_key("openssh").decode().split()[:2]
    return f"{algorithm} {data}"


def raise_open_files_limit(wanted: int) -> None:
    """Each host needs a listening socket and a connection: lift the soft limit if needed."""
    try:
        import resource
    except ImportError:  # not on this platform
        return
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))


def _load_public_key(key: asyncssh.SSHKey | str | Path) -> asyncssh.SSHKey:
    if isinstance(key, asyncssh.SSHKey):
        return key
    if isinstance(key, Path):
        return asyncssh.read_public_key(str(key))
    return asyncssh.import_public_key(key)


class _Session(asyncssh.SSHServerSession[bytes]):
    """One exec channel: answer the command (after the host's hang, if any) and exit."""

    def __init__(self, server: SimServer, host: str) -> None:
        self._server = server
        self._host = host
        self._chan: asyncssh.SSHServerChannel[bytes] | None = None
        self._command: str | None = None
        self._waiting: asyncio.Task[None] | None = None

    def connection_made(self, chan: asyncssh.SSHServerChannel[bytes]) -> None:
        self._chan = chan

    def shell_requested(self) -> bool:
        return False

    def subsystem_requested(self, subsystem: str) -> bool:
        return False

    def exec_requested(self, command: str) -> bool:
        self._command = command
        return True

    def session_started(self) -> None:
        hang = self._server.fleet.hang_s(self._host)
        if hang:
            self._waiting = asyncio.get_running_loop().create_task(self._answer_after_hang())
        else:
            self._answer()

    def connection_lost(self, exc: Exception | None) -> None:
        if self._waiting is not None:
            self._waiting.cancel()
        self._chan = None

    async def _answer_after_hang(self) -> None:
        loop = asyncio.get_running_loop()
        started = loop.time()
        while True:
            hang = self._server.fleet.hang_s(self._host)
            left = None if hang is None else hang - (loop.time() - started)
            if left is None or left <= 0:
                break
            changed = self._server._hang_changed(self._host)
            try:
                await asyncio.wait_for(changed.wait(), None if math.isinf(left) else left)
            except TimeoutError:
                break
        self._waiting = None
        self._answer()

    def _answer(self) -> None:
        chan, command = self._chan, self._command
        if chan is None or command is None:
            return
        fleet = self._server.fleet
        login = chan.get_extra_info("username")
        result = fleet.run_command(
            self._host, command, fleet.now(), login=login if isinstance(login, str) else None
        )
        try:
            if result.stdout:
                chan.write(result.stdout.encode())
            if result.stderr:
                chan.write_stderr(result.stderr.encode())
            chan.exit(result.exit_status)
        except OSError:  # the client went away meanwhile
            return
        self._server.requests += 1


class _Connection(asyncssh.SSHServer):
    """One client connection to one simulated host (found by the port it came in on)."""

    def __init__(self, server: SimServer) -> None:
        self._server = server
        self._conn: asyncssh.SSHServerConnection | None = None
        self._host: str | None = None

    def connection_made(self, conn: asyncssh.SSHServerConnection) -> None:
        self._conn = conn
        sockname = conn.get_extra_info("sockname")
        self._host = self._server._host_by_port.get(sockname[1]) if sockname else None
        if self._host is None or self._server.fleet.is_down(self._host):
            asyncio.get_running_loop().call_soon(conn.abort)
            return
        self._server._connections.setdefault(self._host, set()).add(conn)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._host is not None and self._conn is not None:
            self._server._connections.get(self._host, set()).discard(self._conn)

    def begin_auth(self, username: str) -> bool:
        return True

    def password_auth_supported(self) -> bool:
        return False

    def public_key_auth_supported(self) -> bool:
        return True

    def validate_public_key(self, username: str, key: asyncssh.SSHKey) -> bool:
        return self._server.accept_any_key or key.public_data in self._server._allowed_keys

    def session_requested(self) -> _Session | bool:
        if self._host is None:
            return False
        return _Session(self._server, self._host)


class SimServer:
    """Serve `fleet` over SSH: `async with SimServer(fleet, authorized_keys=[pub]) as s:`."""

    def __init__(
        self,
        fleet: SimFleet,
        *,
        address: str = "127.0.0.1",
        base_port: int = 0,
        host_key: asyncssh.SSHKey | str | Path | None = None,
        authorized_keys: Iterable[asyncssh.SSHKey | str | Path] = (),
        accept_any_key: bool = False,
    ) -> None:
        if not 0 <= base_port <= 65535 - len(fleet.hosts) + 1:
            raise ValueError(f"base port {base_port} leaves no room for {len(fleet.hosts)} hosts")
        self.fleet = fleet
        self.address = address
        self.base_port = base_port
        self.accept_any_key = accept_any_key
        self._host_key_source = host_key
        self._allowed_keys = {_load_public_key(k).public_data for k in authorized_keys}
        self.host_key: asyncssh.SSHKey | None = None
        self.ports: dict[str, int] = {}
        self.requests = 0  # commands answered since start
        self._host_by_port: dict[int, str] = {}
        self._acceptors: dict[str, asyncssh.SSHAcceptor] = {}
        self._connections: dict[str, set[asyncssh.SSHServerConnection]] = {}
        self._hang_events: dict[str, asyncio.Event] = {}
        self._relisten: dict[str, asyncio.Task[None]] = {}
        self._options: asyncssh.SSHServerConnectionOptions | None = None
        self._unsubscribe: Any = None
        self._closing = False

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        source = self._host_key_source
        if source is None:
            self.host_key = asyncssh.generate_private_key(KEY_ALGORITHM)
        elif isinstance(source, asyncssh.SSHKey):
            self.host_key = source
        else:
            self.host_key = asyncssh.read_private_key(str(source))
        self._options = asyncssh.SSHServerConnectionOptions(
            server_host_keys=[self.host_key],
            server_factory=lambda: _Connection(self),
            encoding=None,
            encryption_algs=list(ENCRYPTION_ALGS),
            allow_pty=False,
            agent_forwarding=False,
            x11_forwarding=False,
            login_timeout=30,
        )
        self._unsubscribe = self.fleet.subscribe(self._on_event)
        try:
            names = [h for h in self.fleet.hosts if not self.fleet.is_down(h)]
            acceptors = await asyncio.gather(
                *(
                    self._listen(self.base_port + i if self.base_port else 0)
                    for i, _ in enumerate(names)
                )
            )
            for name, acceptor in zip(names, acceptors, strict=True):
                self._add_listener(name, acceptor)
            # Hosts down from the start get their port when they come up (or a fixed one now).
            for i, name in enumerate(self.fleet.hosts):
                if name not in self.ports and self.base_port:
                    self.ports[name] = self.base_port + i
                    self._host_by_port[self.ports[name]] = name
        except BaseException:
            await self.close()
            raise

    async def _listen(self, port: int) -> asyncssh.SSHAcceptor:
        return await asyncssh.listen(
            self.address, port, options=self._options, reuse_address=True, backlog=512
        )

    def _add_listener(self, name: str, acceptor: asyncssh.SSHAcceptor) -> None:
        port = acceptor.get_port()
        self._acceptors[name] = acceptor
        self.ports[name] = port
        self._host_by_port[port] = name

    async def close(self) -> None:
        self._closing = True
        if self._unsubscribe is not None:
            self._unsubscribe()
            self._unsubscribe = None
        for task in self._relisten.values():
            task.cancel()
        acceptors = list(self._acceptors.values())
        self._acceptors.clear()
        for acceptor in acceptors:
            acceptor.close()
        for conns in self._connections.values():
            for conn in list(conns):
                conn.abort()
        self._connections.clear()
        for acceptor in acceptors:
            with contextlib.suppress(Exception):
                await acceptor.wait_closed()
        await asyncio.gather(*self._relisten.values(), return_exceptions=True)

    async def __aenter__(self) -> SimServer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def settled(self) -> None:
        """Wait until hosts brought back up listen again."""
        while self._relisten:
            await asyncio.gather(*list(self._relisten.values()), return_exceptions=True)

    # -- scripted changes -----------------------------------------------------------------

    def _hang_changed(self, host: str) -> asyncio.Event:
        event = self._hang_events.get(host)
        if event is None:
            event = self._hang_events[host] = asyncio.Event()
        return event

    def _on_event(self, event: SimEvent) -> None:
        if self._closing:
            return
        if event.what == "hang":
            waiting = self._hang_events.pop(event.host, None)
            if waiting is not None:
                waiting.set()
        elif event.what == "down":
            if self.fleet.is_down(event.host):
                acceptor = self._acceptors.pop(event.host, None)
                if acceptor is not None:
                    acceptor.close()
                for conn in list(self._connections.pop(event.host, ())):
                    conn.abort()
            elif event.host not in self._acceptors and event.host not in self._relisten:
                task = asyncio.get_running_loop().create_task(self._listen_again(event.host))
                self._relisten[event.host] = task

    async def _listen_again(self, host: str) -> None:
        try:
            acceptor = await self._listen(self.ports.get(host, 0))
            if self._closing or self.fleet.is_down(host):
                acceptor.close()
            else:
                self._add_listener(host, acceptor)
        finally:
            self._relisten.pop(host, None)

    # -- what clients need ----------------------------------------------------------------

    def open_connections(self, host: str) -> int:
        """How many SSH connections to `host` are open now (a client still polling it)."""
        return len(self._connections.get(host, ()))

    def client_ports(self, host: str) -> list[int]:
        """The client-side ports of the SSH connections to `host` open now: which process
        polls it (tests match them to processes)."""
        ports = []
        for conn in self._connections.get(host, ()):
            peer = conn.get_extra_info("peername")
            if peer:
                ports.append(int(peer[1]))
        return sorted(ports)

    def known_hosts_lines(self) -> list[str]:
        """One known_hosts line per host: `[127.0.0.1]:PORT ssh-ed25519 AAAA...`."""
        if self.host_key is None:
            raise RuntimeError("start the server first")
        key = public_key_text(self.host_key)
        return [f"[{self.address}]:{self.ports[name]} {key}" for name in self.fleet.hosts]

    def hosts_config(self, user: str, key_file: str | Path) -> list[dict[str, Any]]:
        """Warden's `[[hosts]]` entries for this fleet."""
        return [
            {
                "name": name,
                "address": self.address,
                "port": self.ports[name],
                "user": user,
                "key_file": str(key_file),
            }
            for name in self.fleet.hosts
            if name in self.ports
        ]
