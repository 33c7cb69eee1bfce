"""A RabbitMQ node and a PostgreSQL cluster of the test's own, to stop, restart and freeze.

The shared servers (127.0.0.1:5672 and :5432) serve every other test at once: a fault test
that stopped them would break its neighbours. These run on free ports, started as the
installed servers are (Debian's `rabbitmq-server`; PostgreSQL's `initdb` and `pg_ctl` as the
`postgres` user), and are removed afterwards:

    with private_rabbit() as rabbit:    # rabbit.url: amqp://guest:guest@127.0.0.1:PORT/
        rabbit.stop(); rabbit.start()    # the broker application down, up
        rabbit.freeze(); rabbit.thaw()   # SIGSTOP / SIGCONT its Erlang VM
        rabbit.messages("a-queue")       # (ready, unacknowledged)

    with private_postgres() as pg:      # pg.url("warden"): postgresql+asyncpg://...
        pg.stop(); pg.start()

Their data lives in a folder of their own under /tmp (the servers run as the rabbitmq and
postgres users, who cannot enter pytest's private temp dirs).
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.ports import free_port

START_DEADLINE_S = 90.0


def _wait_for_port(port: int, what: str, deadline_s: float = START_DEADLINE_S) -> None:
    import socket

    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        with socket.socket() as sock, contextlib.suppress(OSError):
            sock.settimeout(1)
            sock.connect(("127.0.0.1", port))
            return
        time.sleep(0.3)
    pytest.fail(f"{what} did not listen on 127.0.0.1:{port} within {deadline_s:g}s")


@dataclass
class PrivateRabbit:
    directory: Path
    port: int
    node: str
    beam_pid: int = 0  # its Erlang VM: the same across stop() and start()

    @property
    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}/"

    def ctl(self, *args: str) -> str:
        done = subprocess.run(
            ["rabbitmqctl", "-q", "-n", self.node, *args],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            pytest.fail(f"rabbitmqctl {' '.join(args)} failed: {done.stderr or done.stdout}")
        return done.stdout.strip()

    def pid(self) -> int:
        return int(self.ctl("eval", "os:getpid().").strip('"'))

    def stop(self) -> None:
        """The broker stops (connections drop, the port closes); its node stays."""
        self.ctl("stop_app")

    def start(self) -> None:
        self.ctl("start_app")
        _wait_for_port(self.port, "the private RabbitMQ")

    def freeze(self) -> None:
        """The broker stops answering, its connections stay open (a hung machine)."""
        os.kill(self.beam_pid, signal.SIGSTOP)

    def thaw(self) -> None:
        os.kill(self.beam_pid, signal.SIGCONT)

    def messages(self, queue: str) -> tuple[int, int]:
        """(ready, unacknowledged) messages of `queue` on the default vhost; (0, 0) when there
        is no such queue."""
        columns = ("name", "messages_ready", "messages_unacknowledged")
        for line in self.ctl("list_queues", "--no-table-headers", *columns).splitlines():
            name, ready, unacknowledged = line.split("\t")
            if name == queue:
                return int(ready), int(unacknowledged)
        return 0, 0


def _own_folder(prefix: str, owner: str) -> Path:
    home = Path(tempfile.mkdtemp(prefix=prefix))
    shutil.chown(home, owner, owner)
    return home


@contextlib.contextmanager
def private_rabbit() -> Iterator[PrivateRabbit]:
    if shutil.which("rabbitmq-server") is None:
        pytest.skip("rabbitmq-server is not installed")
    home = _own_folder("warden-rabbit-", "rabbitmq")
    port, dist_port = free_port(), free_port()
    node = f"warden-test-{port}@localhost"
    (home / "enabled_plugins").write_text("[].\n")
    (home / "rabbitmq.conf").write_text(f"listeners.tcp.default = 127.0.0.1:{port}\n")
    for name in ("enabled_plugins", "rabbitmq.conf"):
        shutil.chown(home / name, "rabbitmq", "rabbitmq")
    env = {
        **os.environ,
        "RABBITMQ_NODENAME": node,
        "RABBITMQ_DIST_PORT": str(dist_port),
        "RABBITMQ_CONFIG_FILE": str(home / "rabbitmq.conf"),
        "RABBITMQ_MNESIA_BASE": str(home / "mnesia"),
        "RABBITMQ_LOG_BASE": str(home / "log"),
        "RABBITMQ_ENABLED_PLUGINS_FILE": str(home / "enabled_plugins"),
    }
    subprocess.run(["rabbitmq-server", "-detached"], env=env, cwd="/tmp", check=True, timeout=60)
    rabbit = PrivateRabbit(home, port, node)
    try:
        _wait_for_port(port, "the private RabbitMQ")
        rabbit.beam_pid = rabbit.pid()
        yield rabbit
    finally:
        if rabbit.beam_pid:
            with contextlib.suppress(ProcessLookupError):
                rabbit.thaw()
        subprocess.run(
            ["rabbitmqctl", "-q", "-n", node, "stop"], capture_output=True, timeout=120, check=False
        )
        shutil.rmtree(home, ignore_errors=True)


@dataclass
class PrivatePostgres:
    directory: Path
    port: int
    bin: Path

    def url(self, database: str = "postgres") -> str:
        return f"postgresql+asyncpg://postgres@127.0.0.1:{self.port}/{database}"

    def _pg_ctl(self, *args: str) -> None:
        subprocess.run(
            [
                "runuser",
                "-u",
                "postgres",
                "--",
                str(self.bin / "pg_ctl"),
                "-D",
                str(self.directory),
                "-w",
                "-t",
                "60",
                *args,
            ],
            capture_output=True,
            timeout=120,
            check=True,
        )

    def stop(self) -> None:
        self._pg_ctl("stop", "-m", "fast")

    def start(self) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._pg_ctl("start", "-l", str(self.directory / "server.log"), "-o", options)
        _wait_for_port(self.port, "the private PostgreSQL")


@contextlib.contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found or shutil.which("runuser") is None:
        pytest.skip("PostgreSQL's initdb is not installed")
    home = _own_folder("warden-pg-", "postgres")
    pg = PrivatePostgres(home, free_port(), Path(found[-1]).parent)
    subprocess.run(
        [
            "runuser",
            "-u",
            "postgres",
            "--",
            str(pg.bin / "initdb"),
            "-D",
            str(home),
            "-A",
            "trust",
            "-U",
            "postgres",
        ],
        capture_output=True,
        timeout=120,
        check=True,
    )
    pg.start()
    try:
        yield pg
    finally:
        with contextlib.suppress(Exception):
            pg.stop()
        shutil.rmtree(home, ignore_errors=True)
