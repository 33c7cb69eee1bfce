"""Two replicas of every service, each its own OS process (`warden run <service>`), over real
RabbitMQ and PostgreSQL: one replica of each service killed with SIGKILL in turn under load,
then (on a broker and a database of the test's own) RabbitMQ and PostgreSQL restarted.

The system: a simulated fleet of 3 hosts x 4 GPUs served over real SSH from the test's event
loop; 2 x monitor, reservations, jobs, violations and gateway (tests/support/replicas.py), the
two gateways behind one address (`GatewayPool`, a reverse proxy's retry on refused
connections); escalation `0s webhook owner`, `6s webhook owner` to a real HTTP receiver
(tests/support/webhooks.py) that keeps every delivery. Squats: alice reserves a GPU from now,
then bob starts a process on it (the sim shows it to the monitors). Load: alice books 30-minute
slots tomorrow and reads them back, without pause, through the gateways.

What must hold afterwards, whatever was killed when:
- every squat has exactly one incident, and each of its two steps reached the receiver exactly
  once (the receiver counts per incident and step; nothing else reached it);
- every job's tasks were followed to their end, each run once (`/jobs/{id}/history`);
- every reservation answered 201 is there, each create booked once; no request got a 409 (a
  create redelivered after its replica died is answered with its booking) or a 500;
- after a restart of the broker or the database, health is ok again on both gateways without
  anyone's help, and squats made afterwards are detected and escalated, once.

The reservations replicas start first and the others once one answers: the reservations
service learns of GPUs only from the monitor's `gpu.discovered`, sent once per GPU, so one that
starts after the monitors' first poll never learns of them (a start-up race of its own, not
what this test is about). Deadlines are generous (the machine is shared); nothing asserts how
long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from services.shared.bus import Bus
from services.shared.cluster.replicas import Replicas
from services.shared.errors import WardenError
from services.shared.runtime import make_bus
from services.sim.model import SimFleet
from tests.support.accounts import PASSWORD
from tests.support.fleet import served_fleet
from tests.support.polling import until
from tests.support.ports import free_port
from tests.support.private_servers import private_postgres, private_rabbit
from tests.support.replicas import (
    GatewayPool,
    ReplicaProcess,
    ReplicaProcesses,
    heard,
    replica_processes,
    roles,
    watch_replicas,
)
from tests.support.system import system_settings
from tests.support.webhooks import webhook_receiver

pytestmark = [pytest.mark.amqp, pytest.mark.postgres, pytest.mark.faults, pytest.mark.timeout(240)]

BACKENDS = ("reservations", "monitor", "jobs", "violations")
STEPS = ["0s webhook owner", "6s webhook owner"]
JOB_HOST = 2  # squats take GPUs of hosts 0 and 1
LOAD_HOST = 1  # the load books its GPUs tomorrow: no overlap with the squats of today
DEADLINE_S = 60.0
# No answer (the request may still have been carried out): no gateway or no service reached.
NO_ANSWER = (0, 503)


@dataclass
class Squat:
    host: str
    gpu: int
    reservation_id: int
    pid: int


@dataclass
class System:
    fleet: SimFleet
    cluster: ReplicaProcesses
    pool: GatewayPool
    ports: list[int]
    hooks: list[dict[str, Any]]
    bus: Bus
    gateway_ports: dict[str, int] = field(default_factory=dict)  # label → its port
    watch: Replicas | None = None
    squats: list[Squat] = field(default_factory=list)
    jobs: list[int] = field(default_factory=list)
    created: list[int] = field(default_factory=list)  # reservations answered 201 to the load
    # Every status the load got. Never a 409: a create the killed replica committed but did
    # not answer is delivered again (RPC requests are acknowledged after their answer), and
    # the other replica answers it with the booking the first one made.
    answers: Counter[int] = field(default_factory=Counter)
    _titles: itertools.count[int] = field(default_factory=itertools.count)

    def report(self) -> str:
        return f"answers {dict(self.answers)}\nhooks {self.steps()}\n{self.cluster.logs()}"

    async def until(self, condition: Callable[[], Any], what: str) -> Any:
        """`condition` until truthy; fails at once if a replica nobody killed has ended."""

        def alive_and() -> Any:
            self.cluster.check_alive()
            return condition()

        return await until(alive_and, what, DEADLINE_S, interval=0.25, report=self.report)

    # --- the gateways --------------------------------------------------------------------

    async def health_ok(self, what: str) -> None:
        """Every gateway still running answers GET /health with 200 (every service ok)."""
        ports = [self.gateway_ports[r.label] for r in self.cluster.of("gateway")]

        async def all_ok() -> bool:
            self.cluster.check_alive()
            answers = [await self.pool.call("GET", "/health", port=port) for port in ports]
            return all(status == 200 for status, _ in answers)

        await until(all_ok, what, DEADLINE_S, interval=0.5, report=self.report)

    async def ask(
        self,
        method: str,
        path: str,
        body: Any = None,
        headers: dict[str, str] | None = None,
        **query: Any,
    ) -> Any:
        """An answer that must come (retried while no gateway or service answers), not 5xx."""

        async def answered() -> tuple[int, Any] | None:
            status, answer = await self.pool.call(method, path, body, headers=headers, **query)
            return None if status in NO_ANSWER else (status, answer)

        status, answer = await self.until(answered, f"{method} {path} answered")
        assert status < 500, (method, path, status, answer)
        return status, answer

    # --- squats and what the receiver got ------------------------------------------------

    async def squat(self, host_index: int, gpu: int) -> Squat:
        """alice reserves GPU `gpu` of host `host_index` from now; bob starts a process on it."""
        host = self.fleet.hosts[host_index]
        uuid = await self.gpu_uuid(host, gpu)
        title = f"squatted {next(self._titles)}"
        body = {
            "gpus": [uuid],
            "start": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "duration_minutes": 60,
            "title": title,
        }
        # It may have been made though not answered: sent again with its key, it is answered.
        key = {"Idempotency-Key": title.replace(" ", "-")}
        status, answer = await self.pool.call("POST", "/reservations", body, headers=key)
        if status in NO_ANSWER:
            status, answer = await self.ask("POST", "/reservations", body, headers=key)
        assert status == 201, answer
        pid = self.fleet.start_process(host, gpu, "bob", "python steal_gpu.py")
        self.squats.append(Squat(host, gpu, answer["id"], pid))
        return self.squats[-1]

    async def gpu_uuid(self, host: str, index: int) -> str:
        async def found() -> str | None:
            status, body = await self.pool.call("GET", "/gpus", host=host)
            if status != 200:
                return None
            return next((g["uuid"] for g in body["gpus"] if g["index"] == index), None)

        uuid: str = await self.until(found, f"GPU {index} of {host}")
        return uuid

    def steps(self, squat: Squat | None = None) -> list[tuple[str, int]]:
        """(incident, step index) of every delivery (of `squat`'s incidents), as received."""
        return [
            (d["incident"]["incident_id"], d["incident"]["step_index"])
            for d in self.hooks
            if squat is None or d["incident"]["reservation_id"] == squat.reservation_id
        ]

    async def delivered(self, squat: Squat, step: int) -> None:
        await self.until(
            lambda: any(index == step for _, index in self.steps(squat)),
            f"step {step} of the squat on {squat.host} GPU {squat.gpu} delivered",
        )

    async def recorded(self, squat: Squat, step: int) -> None:
        """Until the incident's timeline holds the outcome of step `step` (a kill after this
        cannot make that step go out again)."""
        await self.delivered(squat, step)
        [(incident, _)] = {item for item in self.steps(squat) if item[1] == step}

        async def in_timeline() -> bool:
            status, body = await self.pool.call("GET", f"/violations/{incident}")
            return status == 200 and any(
                e["kind"] == "action" and e["step_index"] == step for e in body["timeline"]
            )

        await self.until(in_timeline, f"step {step} of {incident} recorded")

    # --- jobs ------------------------------------------------------------------------------

    async def start_job(self, name: str, tasks: list[tuple[int, str]]) -> int:
        """alice's job, one task per (GPU of the jobs' host, command), started."""
        host = self.fleet.hosts[JOB_HOST]
        definition = {
            "name": name,
            "tasks": [{"host": host, "command": c, "gpus": [g]} for g, c in tasks],
        }
        status, job = await self.ask("POST", "/jobs", definition)
        assert status == 201, job
        status, started = await self.ask("POST", f"/jobs/{job['id']}/start")
        assert status == 200, started
        self.jobs.append(job["id"])
        return int(job["id"])

    async def job_in(self, job_id: int, *statuses: str) -> dict[str, Any]:
        async def reached() -> dict[str, Any] | None:
            status, job = await self.pool.call("GET", f"/jobs/{job_id}")
            return job if status == 200 and job["status"] in statuses else None

        found: dict[str, Any] = await self.until(reached, f"job {job_id} {statuses}")
        return found

    # --- replicas --------------------------------------------------------------------------

    async def kill_one(self, service: str) -> ReplicaProcess:
        """kill -9 one replica of `service`: the active one where one leads (its heartbeat
        says `leader`; the other says `standby`), else the oldest."""
        assert self.watch is not None
        watch = self.watch
        await self.until(
            lambda: len(heard(watch, service)) >= 2, f"both {service} replicas heartbeating"
        )
        live = self.cluster.of(service)
        by_role = roles(watch, service)
        leading = [r for r in live if by_role.get(r.pid) not in (None, "standby")]
        victim = (leading or live)[0]
        self.cluster.kill(victim.label)
        return victim


async def answers(bus: Bus, service: str) -> bool:
    with contextlib.suppress(WardenError):
        await bus.call(service, "health", {}, timeout=1)
        return True
    return False


async def every_gpu_known(bus: Bus, count: int) -> bool:
    with contextlib.suppress(WardenError):
        return len(await bus.call("reservations", "list_gpus", {})) == count
    return False


async def load(system: System, gpus: list[str], stop: asyncio.Event) -> None:
    """alice books 30-minute slots from tomorrow, round robin over `gpus` (never overlapping),
    and reads back one she got, until `stop`."""
    base = datetime.now(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    for n in itertools.count():
        if stop.is_set():
            return
        start = base + timedelta(minutes=30 * (n // len(gpus)))
        body = {
            "gpus": [gpus[n % len(gpus)]],
            "start": start.isoformat(),
            "duration_minutes": 30,
            "title": f"load {n}",
        }
        status, answer = await system.pool.call("POST", "/reservations", body)
        system.answers[status] += 1
        if status == 201:
            system.created.append(answer["id"])
        if system.created:
            status, _ = await system.pool.call("GET", f"/reservations/{system.created[-1]}")
            system.answers[status] += 1
        await asyncio.sleep(0.05)


@contextlib.asynccontextmanager
async def replicated_system(
    tmp_path: Path, amqp_url: str, database_url: str
) -> AsyncIterator[System]:
    """Two replicas of every service on the fleet, healthy, alice signed in."""
    fleet = SimFleet(3, 4, seed=11, churn=False)
    hooks: list[dict[str, Any]] = []
    async with served_fleet(fleet, tmp_path) as served, aiohttp.ClientSession() as session:
        receiver = await webhook_receiver(hooks, "/hook")
        try:
            receiver_port = receiver.addresses[0][1]
            ports = [free_port(), free_port()]  # once the hosts and the receiver hold theirs
            settings = await system_settings(
                tmp_path,
                served,
                bus={"amqp_url": amqp_url, "rpc_timeout_s": 3.0},
                storage={"database_url": database_url},
                gateway={"port": ports[0], "frontend_dir": str(tmp_path / "no-frontend")},
                monitor={"interval_s": 1.0},
                replicas={"heartbeat_s": 0.5, "dead_after_s": 2.5, "lease_s": 3.0},
                jobs={"poll_interval_s": 0.5, "int_grace_s": 1.0, "term_grace_s": 1.0},
                violations={
                    "steps": STEPS,
                    "handlers": ["webhook"],
                    "webhook_min_interval_s": 0,
                    "webhooks": [
                        {
                            "url": f"http://127.0.0.1:{receiver_port}/hook",
                            "format": "json",
                            "name": "receiver",
                        }
                    ],
                },
            )
            bus = make_bus(settings, "amqp", name="test")
            await bus.start()
            with replica_processes(tmp_path, tmp_path / "warden.toml") as cluster:
                # The reservations service first: it hears of GPUs only from `gpu.discovered`,
                # which a monitor sends once, at its first poll (see the module's notes).
                for service in BACKENDS:
                    cluster.start(service)
                    cluster.start(service)
                    if service == "reservations":
                        await until(
                            lambda: answers(bus, "reservations"),
                            "the reservations service answering",
                            DEADLINE_S,
                            interval=0.25,
                            report=cluster.logs,
                        )
                system = System(fleet, cluster, GatewayPool(session, ports), ports, hooks, bus)
                for port in ports:
                    gateway = cluster.start("gateway", env={"WARDEN_GATEWAY_PORT": str(port)})
                    system.gateway_ports[gateway.label] = port
                await system.health_ok("every service ok on both gateways")
                await system.until(
                    lambda: every_gpu_known(bus, len(fleet.hosts) * 4),
                    "every GPU known to the reservations service",
                )
                status, signed_in = await system.pool.call(
                    "POST", "/session", {"username": "alice", "password": PASSWORD}
                )
                assert status == 201, signed_in
                system.pool.token = signed_in["access_token"]
                try:
                    yield system
                finally:
                    await bus.close()
        finally:
            await receiver.cleanup()


async def check_escalations(system: System) -> None:
    """Every squat: one incident, each step delivered exactly once; nothing else delivered."""
    for squat in system.squats:
        await system.delivered(squat, len(STEPS) - 1)
    await asyncio.sleep(3)  # a step sent twice would have come by now
    for squat in system.squats:
        status, page = await system.ask("GET", "/violations", reservation_id=squat.reservation_id)
        assert status == 200, page
        incidents = [i["id"] for i in page["items"]]
        assert len(incidents) == 1, (squat, page["items"])
        assert sorted(system.steps(squat)) == [(incidents[0], i) for i in range(len(STEPS))], (
            squat,
            system.steps(squat),
        )
    assert len(system.steps()) == len(system.squats) * len(STEPS), system.steps()


async def check_reservations(system: System) -> None:
    """Every reservation the load was answered 201 for is there; nothing answered 500."""
    assert system.created, system.answers
    status, page = await system.ask(
        "GET",
        "/reservations",
        owner="alice",
        start=datetime.now(UTC).isoformat(),
        end=(datetime.now(UTC) + timedelta(days=30)).isoformat(),
        limit=500,
    )
    assert status == 200, page
    missing = set(system.created) - {r["id"] for r in page["items"]}
    found = [await system.pool.call("GET", f"/reservations/{n}") for n in sorted(missing)]
    assert not missing, (found, system.answers)
    titles = Counter(r["title"] for r in page["items"])
    assert all(n == 1 for n in titles.values()), titles  # each create booked once
    assert set(system.answers) <= {200, 201, *NO_ANSWER}, system.answers


@contextlib.asynccontextmanager
async def under_load(system: System) -> AsyncIterator[None]:
    host = system.fleet.hosts[LOAD_HOST]
    gpus = [await system.gpu_uuid(host, index) for index in range(4)]
    stop = asyncio.Event()
    running = asyncio.create_task(load(system, gpus, stop))
    try:
        yield
    finally:
        stop.set()
        await running


async def test_one_replica_of_each_service_killed_in_turn_under_load(
    tmp_path: Path, amqp_url: str, pg_url: str
) -> None:
    async with replicated_system(tmp_path, amqp_url, pg_url) as system:
        system.watch = await watch_replicas(system.bus, *BACKENDS, "gateway")
        async with under_load(system):
            await kill_each_in_turn(system)
        await check_escalations(system)
        await check_reservations(system)


async def kill_each_in_turn(system: System) -> None:
    long_job = await system.start_job("long", [(0, "sleep 25"), (1, "sleep 20")])
    first = await system.squat(0, 0)
    await system.recorded(first, 0)

    # violations: the active replica dies between the steps of an incident
    await system.kill_one("violations")
    second = await system.squat(0, 1)
    await system.delivered(first, 1)
    await system.delivered(second, 0)

    # jobs: the active replica dies while both tasks of a job run
    await system.job_in(long_job, "running")
    await system.kill_one("jobs")
    short_job = await system.start_job("short", [(2, "sleep 3"), (3, "exit 3")])

    # monitor: the other replica polls every host (a squat on each squatted host)
    await system.kill_one("monitor")
    for host_index, gpu in ((1, 0), (0, 2)):
        await system.delivered(await system.squat(host_index, gpu), 0)

    # reservations, then a gateway: the load goes on through the others
    for service, gpu in (("reservations", 1), ("gateway", 2)):
        await system.kill_one(service)
        created = len(system.created)
        await system.until(lambda n=created: len(system.created) > n, "the load answered 201")
        await system.delivered(await system.squat(1, gpu), 0)

    done = await system.job_in(long_job, "succeeded", "failed", "stopped")
    assert [(t["status"], t["exit_code"]) for t in done["tasks"]] == [("succeeded", 0)] * 2
    done = await system.job_in(short_job, "failed")
    assert [(t["status"], t["exit_code"]) for t in done["tasks"]] == [
        ("succeeded", 0),
        ("failed", 3),
    ]
    for job_id in system.jobs:  # each task ran once: a new leader starts nothing again
        status, history = await system.ask("GET", f"/jobs/{job_id}/history")
        assert status == 200, history
        assert sorted((r["task"], r["run"]) for r in history["runs"]) == [(0, 1), (1, 1)]
    await system.health_ok("every service ok with one replica each")


async def test_the_broker_and_the_database_restarted_under_two_replicas_each(
    tmp_path: Path,
) -> None:
    with private_rabbit() as rabbit, private_postgres() as pg:
        async with replicated_system(tmp_path, rabbit.url, pg.url()) as system:
            async with under_load(system):
                await system.recorded(await system.squat(0, 0), 0)

                await asyncio.to_thread(rabbit.stop)
                await asyncio.to_thread(rabbit.start)
                await system.health_ok("every service ok after RabbitMQ restarted")
                await system.delivered(await system.squat(0, 1), 0)

                await asyncio.to_thread(pg.stop)
                await asyncio.to_thread(pg.start)
                await system.health_ok("every service ok after PostgreSQL restarted")
                await system.delivered(await system.squat(1, 0), 0)
            await check_escalations(system)
            await check_reservations(system)
            for label in system.cluster.started:
                assert "Traceback" not in system.cluster.log(label), system.cluster.logs()
