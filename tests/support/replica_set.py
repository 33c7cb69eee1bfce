"""Several `warden run <service>` processes (replicas of violations or jobs) against one
PostgreSQL database and one RabbitMQ vhost, and what they need around them, run in this
process:

- a monitor double (`MonitorDouble`: `list_hosts`, `gpu.discovered`, `processes.observed`);
- a reservations double answering `calendar` and `list_gpus` with the reservations made here
  (a new leader asks them again when it takes over), which also emits `reservation.created`,
  and `contacts` (no addresses: no e-mail goes out);
- a real HTTP webhook receiver (`[[violations.webhooks]]` of format json) that keeps every
  delivery as (incident id, step index, receive time).

Each replica is a separate OS process with its own log file; `kill(label)` is a real SIGKILL.
Who leads is read from the replicas' own heartbeats (`replica.heartbeat`, role `leader`).
Used by tests/e2e/test_failover.py and bench/_violations_failover.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from aiohttp import web

from services.shared.bus import BusSettings, Teardown
from services.shared.bus.amqp import AmqpBus
from services.shared.cluster.replicas import HEARTBEAT
from services.shared.contracts import Envelope
from tests.support.config import write_config
from tests.support.monitor_double import MonitorDouble, host_record

WARDEN = [sys.executable, "-m", "services.cli"]
REPO = Path(__file__).resolve().parents[2]
OWNER, OFFENDER = "alice", "bob"
HOOK_PATH = "/hooks/failover"
GPUS_PER_HOST = 8


@dataclass(frozen=True)
class Delivery:
    incident_id: str
    step_index: int
    gpu_uuid: str
    at: float  # time.time() when the receiver got it


@dataclass
class Squat:
    host: str
    index: int
    uuid: str
    pid: int


@dataclass
class ReplicaSet:
    folder: Path
    amqp_url: str
    pg_url: str
    steps: tuple[str, ...] = ("0s webhook admins",)
    service: str = "violations"
    lease_s: float = 3.0
    # More config sections (merged over the ones written here): [ssh], [jobs], [[hosts]] ...
    extra: dict[str, Any] = field(default_factory=dict)
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    deliveries: list[Delivery] = field(default_factory=list)
    roles: dict[str, str] = field(default_factory=dict)  # replica id -> role last heard
    reservations: list[dict[str, Any]] = field(default_factory=list)
    gpus: list[dict[str, Any]] = field(default_factory=list)
    squats: list[Squat] = field(default_factory=list)
    bus: AmqpBus | None = None
    _runner: web.AppRunner | None = None
    _teardowns: list[Teardown] = field(default_factory=list)
    _config: Path | None = None

    # --- set-up ----------------------------------------------------------------------------

    async def __aenter__(self) -> ReplicaSet:
        (self.folder / "logs").mkdir(parents=True, exist_ok=True)
        self._runner = await self._receiver()
        hook_url = f"http://127.0.0.1:{self._runner.addresses[0][1]}{HOOK_PATH}"
        self._config = write_config(
            self.folder / "warden.toml",
            log={"level": "info"},
            storage={"data_dir": str(self.folder / "data"), "database_url": self.pg_url},
            bus={"amqp_url": self.amqp_url},
            replicas={"heartbeat_s": 0.5, "dead_after_s": 3.0, "lease_s": self.lease_s},
            violations={
                "mode": "reservations",
                "steps": list(self.steps),
                "handlers": ["webhook"],
                "webhook_min_interval_s": 0,
                "webhooks": [{"url": hook_url, "format": "json", "name": "receiver"}],
            },
            **self.extra,
        )
        done = await asyncio.to_thread(
            subprocess.run,
            [*WARDEN, "--config", str(self._config), "db", "upgrade"],
            cwd=REPO,
            env=self._env(),
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"warden db upgrade failed:\n{done.stdout}{done.stderr}")
        self.bus = AmqpBus(self.amqp_url, BusSettings(), name="failover-harness")
        await self.bus.start()
        self.monitor = MonitorDouble(self.bus)
        await self.monitor.serve()
        self._teardowns.append(
            await self.bus.serve(
                "reservations",
                {
                    "calendar": self._calendar,
                    "list_gpus": self._list_gpus,
                    "contacts": self._contacts,
                },
            )
        )
        self._teardowns.append(
            await self.bus.subscribe(
                self.service, HEARTBEAT, "harness.replicas", self._heard, transient=True
            )
        )
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.kill_all()
        for teardown in self._teardowns:
            with contextlib.suppress(Exception):
                await teardown()
        if self.bus is not None:
            await self.monitor.stop()
            await self.bus.close()
        if self._runner is not None:
            await self._runner.cleanup()

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
        home = self.folder / "home"
        home.mkdir(exist_ok=True)
        return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}

    async def _receiver(self) -> web.AppRunner:
        async def hook(request: web.Request) -> web.Response:
            at = time.time()
            incident = (await request.json())["incident"]
            self.deliveries.append(
                Delivery(
                    incident["incident_id"], int(incident["step_index"]), incident["gpu_uuid"], at
                )
            )
            return web.Response(text="ok")

        app = web.Application()
        app.router.add_post(HOOK_PATH, hook)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    async def _calendar(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self.reservations)

    async def _list_gpus(self, _args: dict[str, Any]) -> list[dict[str, Any]]:
        return list(self.gpus)

    async def _contacts(self, _args: dict[str, Any]) -> dict[str, Any]:
        return {"users": {}, "admins": []}  # nobody has an e-mail address: none is sent

    async def _heard(self, envelope: Envelope) -> None:
        self.roles[envelope.data["replica"]] = envelope.data["role"]

    # --- the replicas ----------------------------------------------------------------------

    def start(self, label: str) -> subprocess.Popen[bytes]:
        assert self._config is not None
        with self.log_path(label).open("ab") as log_file:
            process = subprocess.Popen(
                [*WARDEN, "--config", str(self._config), "run", self.service],
                cwd=REPO,
                env=self._env(),
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self.processes[label] = process
        return process

    def log_path(self, label: str) -> Path:
        return self.folder / "logs" / f"{label}.log"

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.stem} ---\n{path.read_text(errors='replace')[-5000:]}"
            for path in sorted((self.folder / "logs").glob("*.log"))
        )

    def role_of(self, label: str) -> str | None:
        """The role the replica of process `label` said last (None: not heard yet)."""
        pid = self.processes[label].pid
        for replica, role in self.roles.items():
            if f":{pid}-" in replica:
                return role
        return None

    def leader(self) -> str | None:
        leading = [label for label in self.alive() if self.role_of(label) == "leader"]
        return leading[0] if len(leading) == 1 else None

    def alive(self) -> list[str]:
        return [label for label, p in self.processes.items() if p.poll() is None]

    def kill(self, label: str) -> float:
        """SIGKILL, no clean stop; returns time.time() of the kill."""
        at = time.time()
        self.processes[label].send_signal(signal.SIGKILL)
        self.processes[label].wait(10)
        self.roles = {r: role for r, role in self.roles.items() if role != "leader"}
        return at

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(10)

    # --- the fleet -------------------------------------------------------------------------

    async def reserve_and_squat(self, count: int, first_pid: int = 40_000) -> list[Squat]:
        """`count` GPUs reserved by alice (now, for 2 h), each used by a process of bob's."""
        assert self.bus is not None
        made = []
        now = datetime.now(UTC)
        for n in range(len(self.squats), len(self.squats) + count):
            host, index = f"fo-{n // GPUS_PER_HOST:03d}", n % GPUS_PER_HOST
            uuid = f"GPU-failover-{n:04d}-{secrets.token_hex(3)}"
            if host not in self.monitor.hosts:
                await self.monitor.add(host_record(host))
            self.gpus.append({"uuid": uuid, "host": host, "index": index})
            await self.monitor.discovered(host, index, uuid)
            reservation = {
                "id": 10_000 + n,
                "owner": OWNER,
                "guests": [],
                "gpus": [{"uuid": uuid, "host": host, "index": index}],
                "start": (now - timedelta(minutes=1)).isoformat(),
                "end": (now + timedelta(hours=2)).isoformat(),
                "title": "failover",
                "status": "active",
                "created_by": OWNER,
            }
            self.reservations.append(reservation)
            await self.bus.emit("reservation.created", reservation, source="reservations")
            made.append(Squat(host, index, uuid, first_pid + n))
        self.squats.extend(made)
        return made

    async def observe_all(self) -> None:
        """One `processes.observed` per host with every squatter on it (a monitor's poll)."""
        by_host: dict[str, list[tuple[int, str, str, str]]] = {}
        for s in self.squats:
            by_host.setdefault(s.host, []).append((s.pid, OFFENDER, s.uuid, "python squat.py"))
        for host, processes in sorted(by_host.items()):
            await self.monitor.observed(host, processes)

    async def keep_observing(self, every_s: float = 1.0) -> None:
        """Poll as the monitor would, until cancelled."""
        while True:
            await self.observe_all()
            await asyncio.sleep(every_s)

    # --- what the receiver got -------------------------------------------------------------

    def counts(self) -> Counter[tuple[str, int]]:
        return Counter((d.incident_id, d.step_index) for d in self.deliveries)

    def duplicates(self) -> int:
        return sum(n - 1 for n in self.counts().values() if n > 1)

    def incidents_of(self, squat: Squat) -> set[str]:
        """The incidents the receiver heard of for a squatted GPU."""
        return {d.incident_id for d in self.deliveries if d.gpu_uuid == squat.uuid}

    def lost(self) -> int:
        """Squats of which no step at all reached the receiver."""
        return sum(1 for s in self.squats if not self.incidents_of(s))
