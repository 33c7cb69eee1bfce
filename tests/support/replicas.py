"""Several replicas of each Warden service as separate OS processes, lost the way production
loses them (SIGKILL: nothing flushed, no goodbye), and what a test needs to watch them:

    with replica_processes(tmp_path, tmp_path / "warden.toml") as cluster:
        cluster.start("violations")                      # label "violations-1"
        cluster.start("violations")                      # "violations-2"
        cluster.start("gateway", env={"WARDEN_GATEWAY_PORT": str(port)})
        cluster.kill("violations-1")                     # kill -9, reaped
        cluster.start("violations")                      # "violations-3", a fresh replica

    watch = await watch_replicas(bus, "violations", "jobs")   # their heartbeats
    watch.live("violations")                                  # [Replica(role=..., ...)]
    cluster.by_pid(pid_of(replica_id))                        # which process that is

    pool = GatewayPool(session, [port_1, port_2])             # one address for the gateways
    status, body = await pool.call("GET", "/health")

Each process is `python -m services.cli --config CONFIG run SERVICE` (what `warden run`
runs), its output in DIRECTORY/logs/LABEL.log; `logs()` gives every log's tail for a failure
message. Whatever still runs at the end of the block gets SIGTERM, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.shared.bus import Bus
from services.shared.cluster.replicas import Replica, Replicas

WARDEN = [sys.executable, "-m", "services.cli"]
STOP_GRACE_S = 30.0


@dataclass
class ReplicaProcess:
    label: str  # "<service>-<n>", n counting every start of that service
    service: str
    process: subprocess.Popen[bytes]
    log_path: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def alive(self) -> bool:
        return self.process.poll() is None


@dataclass
class ReplicaProcesses:
    """The Warden processes of one test, several per service, each with its log."""

    directory: Path
    config: Path
    env: Mapping[str, str] = field(default_factory=dict)
    started: dict[str, ReplicaProcess] = field(default_factory=dict)
    _count: Counter[str] = field(default_factory=Counter)

    def start(
        self, service: str, *, env: Mapping[str, str] | None = None, label: str | None = None
    ) -> ReplicaProcess:
        """One more replica of `service` (`env` over the test's environment)."""
        self._count[service] += 1
        label = label or f"{service}-{self._count[service]}"
        logs = self.directory / "logs"
        logs.mkdir(exist_ok=True)
        log_path = logs / f"{label}.log"
        with log_path.open("ab") as log:
            process = subprocess.Popen(
                [*WARDEN, "--config", str(self.config), "run", service],
                env={**os.environ, "PYTHONUNBUFFERED": "1", **self.env, **(env or {})},
                cwd=self.directory,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        self.started[label] = ReplicaProcess(label, service, process, log_path)
        return self.started[label]

    def of(self, service: str) -> list[ReplicaProcess]:
        """The replicas of `service` still running, oldest first."""
        return [r for r in self.started.values() if r.service == service and r.alive]

    def by_pid(self, pid: int) -> ReplicaProcess:
        [found] = [r for r in self.started.values() if r.pid == pid]
        return found

    def kill(self, label: str) -> None:
        """kill -9 and reap: the process is gone when this returns."""
        replica = self.started[label]
        with contextlib.suppress(ProcessLookupError):
            replica.process.send_signal(signal.SIGKILL)
        replica.process.wait(timeout=STOP_GRACE_S)

    def check_alive(self) -> None:
        """Fail the test, with the logs, when a replica nobody killed has ended."""
        for replica in self.started.values():
            code = replica.process.poll()
            if code is not None and code != -signal.SIGKILL:
                pytest.fail(f"{replica.label} exited with {code}\n{self.logs()}")

    def log(self, label: str) -> str:
        return self.started[label].log_path.read_text(errors="replace")

    def logs(self, tail: int = 3000) -> str:
        return "\n".join(
            f"--- {label} ---\n{self.log(label)[-tail:]}" for label in sorted(self.started)
        )

    def stop_all(self) -> None:
        running = [r.process for r in self.started.values() if r.alive]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)
        for process in running:
            try:
                process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


@contextlib.contextmanager
def replica_processes(
    directory: Path, config: Path, env: Mapping[str, str] | None = None
) -> Iterator[ReplicaProcesses]:
    cluster = ReplicaProcesses(directory, config, dict(env or {}))
    try:
        yield cluster
    finally:
        cluster.stop_all()


# --- heartbeats -------------------------------------------------------------------------------


def pid_of(replica_id: str) -> int:
    """The process id in a replica id `<service>@<host>:<pid>-<random>`."""
    return int(replica_id.rsplit(":", 1)[1].split("-", 1)[0])


async def watch_replicas(bus: Bus, *services: str) -> Replicas:
    """The live replicas of `services` as their heartbeats tell them, seen from `bus` (a
    started bus of the test's; nothing is sent from it): `.live(service)` lists them with
    their role and details."""
    watch = Replicas(bus, "test", replica_id=f"test@watch:{os.getpid()}-0")
    await watch.watch(*services)
    return watch


def roles(watch: Replicas, service: str) -> dict[int, str]:
    """pid → role of the live replicas of `service`."""
    return {pid_of(r.replica): r.role for r in watch.live(service) if r.service == service}


def heard(watch: Replicas, service: str) -> list[Replica]:
    """The live replicas of `service` other than the watcher itself."""
    return [r for r in watch.live(service) if r.service == service]


# --- the gateways behind one address ------------------------------------------------------------


class GatewayPool:
    """What a reverse proxy in front of the gateways does, in the test: each request goes to
    the next gateway in turn; one that refuses the connection is skipped for that request
    (nginx's `proxy_next_upstream error`), but a request that was sent is never sent again
    (a POST may have been carried out). Answers are (status, JSON body), status 0 when no
    gateway could be reached or the request timed out (the body says why)."""

    def __init__(
        self, session: aiohttp.ClientSession, ports: list[int], *, timeout_s: float = 20.0
    ) -> None:
        self.session = session
        self.ports = list(ports)
        self.timeout = aiohttp.ClientTimeout(total=timeout_s)
        self.token = ""
        self._next = itertools.cycle(range(len(self.ports)))

    async def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        port: int | None = None,
        headers: Mapping[str, str] | None = None,
        **query: Any,
    ) -> tuple[int, Any]:
        """`method` /api/v1`path` through the pool (or to the gateway on `port` alone), with
        `headers` besides the token."""
        first = next(self._next)
        order = [port] if port else self.ports[first:] + self.ports[:first]
        headers = {
            **({"Authorization": f"Bearer {self.token}"} if self.token else {}),
            **(headers or {}),
        }
        why: object = "no gateway"
        for each in order:
            try:
                async with self.session.request(
                    method,
                    f"http://127.0.0.1:{each}/api/v1{path}",
                    json=body,
                    params=query or None,
                    headers=headers,
                    timeout=self.timeout,
                ) as response:
                    return response.status, await response.json(content_type=None)
            except aiohttp.ClientConnectorError as err:  # refused: nothing was sent, next one
                why = err
            except (aiohttp.ClientError, TimeoutError) as err:  # sent: never sent twice
                return 0, repr(err)
        return 0, repr(why)
