"""Faults as production meets them: Warden as separate OS processes on RabbitMQ and PostgreSQL,
a simulated fleet over SSH with someone squatting on a reserved GPU, a webhook receiver that
counts what it gets; then the violations service killed with SIGKILL, the broker stopped and
frozen (escalation steps falling due while it is stopped go out once it is back, once each),
the database stopped.

The broker and database that are stopped or frozen are the test's own (tests/support/
private_servers.py), so no other test feels it; they are controlled from a thread, since the
test's event loop also serves the simulated hosts over SSH. Deadlines are generous; nothing
asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from services.shared.bus.amqp import rpc_queue_name
from services.sim.model import SimFleet
from tests.support.accounts import PASSWORD
from tests.support.fleet import ServedFleet, served_fleet
from tests.support.polling import until
from tests.support.ports import free_port
from tests.support.private_servers import private_postgres, private_rabbit
from tests.support.system import system_settings

pytestmark = [pytest.mark.amqp, pytest.mark.postgres, pytest.mark.faults, pytest.mark.timeout(300)]

WARDEN = [sys.executable, "-m", "services.cli"]
CORE = ("reservations", "monitor", "jobs", "gateway")
DEADLINE_S = 60.0
# Shorter than the defaults (2 s, 6 s, 6 s), as in the other multi-process tests: a monitor
# polls 1.5 heartbeats after it starts, and a violations service started again after a
# SIGKILL leads once the dead one's lease expired. Nothing here measures them.
REPLICAS = {"heartbeat_s": 0.5, "dead_after_s": 3.0, "lease_s": 3.0}


@dataclass
class Hooks:
    """A webhook receiver (json format): every delivery, by (incident, step index)."""

    url: str = ""
    got: list[dict[str, Any]] = field(default_factory=list)

    def steps(self) -> list[tuple[str, int]]:
        return [(d["incident"]["incident_id"], d["incident"]["step_index"]) for d in self.got]


@contextlib.asynccontextmanager
async def hooks() -> AsyncIterator[Hooks]:
    found = Hooks()

    async def receive(request: web.Request) -> web.Response:
        found.got.append(await request.json())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    found.url = f"http://127.0.0.1:{port}/hook"
    try:
        yield found
    finally:
        await runner.cleanup()


@dataclass
class Warden:
    """Warden's processes of one test, each with its log; killed at the end if need be."""

    directory: Path
    config: Path
    port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, label: str, *services: str) -> None:
        with (self.directory / f"{label}.log").open("ab") as log:
            self.processes[label] = subprocess.Popen(
                [*WARDEN, "--config", str(self.config), "run", *services],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=log,
                cwd=self.directory,
            )

    def log(self, label: str) -> str:
        return (self.directory / f"{label}.log").read_text(errors="replace")

    def logs(self) -> str:
        return "\n".join(f"--- {label} ---\n{self.log(label)[-3000:]}" for label in self.processes)

    def kill(self, label: str) -> None:
        process = self.processes[label]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes.values():
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()


@contextlib.contextmanager
def warden(directory: Path, config: Path, port: int) -> Iterator[Warden]:
    running = Warden(directory, config, port)
    try:
        yield running
    finally:
        running.stop_all()


class Api:
    def __init__(self, session: aiohttp.ClientSession, port: int) -> None:
        self.session = session
        self.base = f"http://127.0.0.1:{port}/api/v1"
        self.token = ""

    async def call(self, method: str, path: str, body: Any = None, **query: Any) -> tuple[int, Any]:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        try:
            async with self.session.request(
                method,
                self.base + path,
                json=body,
                params=query or None,
                headers=headers,
                timeout=aiohttp.ClientTimeout(total=30),
            ) as response:
                return response.status, await response.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError) as err:
            return 0, repr(err)

    async def login(self, username: str) -> None:
        status, body = await self.call(
            "POST", "/session", {"username": username, "password": PASSWORD}
        )
        assert status == 201, body
        self.token = body["access_token"]


async def ready(api: Api, fleet: Warden) -> None:
    async def healthy() -> bool:
        status, _body = await api.call("GET", "/health")
        return status == 200

    await until(healthy, "every service ok", DEADLINE_S, interval=0.5, report=fleet.logs)


async def gpu_uuid(api: Api, host: str, index: int) -> str:
    async def found() -> str | None:
        status, body = await api.call("GET", "/gpus", host=host)
        if status != 200:
            return None
        return next((g["uuid"] for g in body["gpus"] if g["index"] == index), None)

    uuid: str = await until(found, f"GPU {index} of {host}", DEADLINE_S, interval=0.5)
    return uuid


async def reserve(api: Api, uuid: str) -> dict[str, Any]:
    start = datetime.now(UTC).replace(microsecond=0)
    status, body = await api.call(
        "POST",
        "/reservations",
        {"gpus": [uuid], "start": start.isoformat(), "duration_minutes": 60, "title": "mine"},
    )
    assert status == 201, body
    return dict(body)


@contextlib.asynccontextmanager
async def squatted_system(
    tmp_path: Path, amqp_url: str, database_url: str, steps: list[str]
) -> AsyncIterator[tuple[Warden, Api, Hooks, ServedFleet, dict[str, Any]]]:
    """Warden as two processes (the violations service alone), alice's reservation of GPU 0
    from now, and bob's process on it: an incident whose steps are webhooks to `hooks`."""
    fleet = SimFleet(1, 2, seed=5, churn=False)
    async with served_fleet(fleet, tmp_path) as served, hooks() as received:
        port = free_port()  # once the simulated hosts and the receiver hold their ports
        settings = await system_settings(
            tmp_path,
            served,
            bus={"amqp_url": amqp_url, "rpc_timeout_s": 3.0},
            storage={"database_url": database_url},
            gateway={"port": port},
            monitor={"interval_s": 1.0},
            replicas=REPLICAS,
            violations={
                "steps": steps,
                "handlers": ["webhook"],
                "webhook_min_interval_s": 0,
                "webhooks": [{"url": received.url, "format": "json", "name": "receiver"}],
            },
        )
        assert settings.gateway.port == port
        with warden(tmp_path, tmp_path / "warden.toml", port) as processes:
            processes.start("core", *CORE)
            processes.start("violations", "violations")
            async with aiohttp.ClientSession() as session:
                api = Api(session, port)
                await ready(api, processes)
                await api.login("alice")
                host = fleet.hosts[0]
                booked = await reserve(api, await gpu_uuid(api, host, 0))
                fleet.start_process(host, 0, "bob", "python steal_gpu.py")
                yield processes, api, received, served, booked


async def incidents_of(api: Api, reservation_id: int) -> list[dict[str, Any]]:
    status, body = await api.call("GET", "/violations", reservation_id=reservation_id)
    assert status == 200, body
    return list(body["items"])


async def test_a_violations_service_killed_mid_incident_continues_it_exactly(
    tmp_path: Path, amqp_url: str, pg_url: str
) -> None:
    # Step 1 falls due after the restart: the killed replica's lease (3 s) has expired and the
    # new one leads by then.
    steps = ["0s webhook owner", "8s webhook owner"]
    async with squatted_system(tmp_path, amqp_url, pg_url, steps) as (
        processes,
        api,
        hooks_,
        _s,
        booked,
    ):
        await until(lambda: hooks_.steps(), "step 0 delivered", DEADLINE_S, report=processes.logs)
        [(incident, _step)] = hooks_.steps()

        async def step_0_recorded() -> bool:
            status, body = await api.call("GET", f"/violations/{incident}")
            return status == 200 and any(e["kind"] == "action" for e in body["timeline"])

        # Mid-incident, between its steps (a kill in the instant between a step's claim and
        # its webhook would leave that step unsent: at most once, see
        # docs/admins/troubleshooting.md).
        await until(step_0_recorded, "step 0 recorded", DEADLINE_S, interval=0.2)
        processes.kill("violations")  # SIGKILL: nothing is flushed, nothing said goodbye
        await asyncio.sleep(3)
        processes.start("violations", "violations")
        await until(
            lambda: (incident, 1) in hooks_.steps(),
            "step 1 delivered after the restart",
            DEADLINE_S,
            report=processes.logs,
        )
        await asyncio.sleep(3)  # anything sent twice would have come by now
        assert sorted(hooks_.steps()) == [(incident, 0), (incident, 1)]
        [only] = await incidents_of(api, booked["id"])
        assert (only["id"], only["status"]) == (incident, "open")
        assert "Traceback" not in processes.log("violations")


async def test_a_stopped_broker_answers_503_with_a_reason_and_recovers_alone(
    tmp_path: Path, pg_url: str
) -> None:
    with private_rabbit() as rabbit:
        async with squatted_system(tmp_path, rabbit.url, pg_url, ["0s webhook owner"]) as (
            processes,
            api,
            hooks_,
            _s,
            booked,
        ):
            await until(lambda: hooks_.steps(), "step 0 delivered", DEADLINE_S)
            await asyncio.to_thread(rabbit.stop)
            answers = [await api.call("GET", "/health") for _ in range(3)]
            answers.append(await api.call("POST", f"/reservations/{booked['id']}/end"))
            answers.append(await api.call("GET", f"/reservations/{booked['id']}"))
            assert [status for status, _ in answers] == [503] * 5, answers
            health = answers[0][1]
            assert health["bus"]["status"] == "down", health
            assert all(body.get("error") == "service_unavailable" for _, body in answers[3:])
            assert all("bus" in body.get("message", "") for _, body in answers[3:])
            await asyncio.to_thread(rabbit.start)

            async def reads_again() -> bool:
                status, _body = await api.call("GET", f"/reservations/{booked['id']}")
                return status == 200

            await until(
                reads_again, "the API works again", DEADLINE_S, interval=0.5, report=processes.logs
            )
            await ready(api, processes)
            # The bus says so once it has restored its consumers, which may be just after the
            # gateway answers again.
            await until(
                lambda: "reconnected to RabbitMQ" in processes.log("core"),
                "the reconnection logged",
                DEADLINE_S,
                report=processes.logs,
            )
            core = processes.log("core")
            assert "internal_error" not in core and "Traceback" not in core
            assert core.count("lost the connection to RabbitMQ") == 1
            assert core.count("reconnected to RabbitMQ") == 1
            assert "is unreachable" not in core  # the hosts were polled all along


async def test_a_request_held_by_a_frozen_broker_is_not_carried_out_later(
    tmp_path: Path, pg_url: str
) -> None:
    with private_rabbit() as rabbit:
        async with squatted_system(tmp_path, rabbit.url, pg_url, ["0s webhook owner"]) as (
            processes,
            api,
            _hooks,
            _s,
            booked,
        ):
            await asyncio.to_thread(rabbit.freeze)
            try:
                status, body = await api.call("POST", f"/reservations/{booked['id']}/end")
                await asyncio.sleep(2)  # the broker wakes up after the caller gave up
            finally:
                await asyncio.to_thread(rabbit.thaw)
            assert status == 503, body
            # The gateway's later calls (health) go out on the channel the request went out on:
            # once they are answered, the request was delivered (or expired) before them.
            await ready(api, processes)

            async def request_settled() -> bool:
                # Nothing waits in the reservations service's RPC queue or is being handled:
                # had the service carried the request out, it would have by now (it
                # acknowledges a request once its answer went out).
                queue = rpc_queue_name("reservations")
                return await asyncio.to_thread(rabbit.messages, queue) == (0, 0)

            await until(request_settled, "the RPC queue settled", DEADLINE_S, interval=0.2)
            status, after = await api.call("GET", f"/reservations/{booked['id']}")
            assert status == 200, after
            assert after["status"] == "active"  # the end the caller was told failed never came
            assert datetime.fromisoformat(after["end"]) > datetime.now(UTC) + timedelta(minutes=50)


async def test_a_stopped_database_answers_503_and_escalation_catches_up_once(
    tmp_path: Path, amqp_url: str
) -> None:
    with private_postgres() as pg:
        steps = ["0s webhook owner", "10s webhook owner"]
        async with squatted_system(tmp_path, amqp_url, pg.url(), steps) as (
            processes,
            api,
            hooks_,
            _s,
            booked,
        ):
            await until(lambda: hooks_.steps(), "step 0 delivered", DEADLINE_S)
            [(incident, _step)] = hooks_.steps()

            async def step_0_recorded() -> bool:
                status, body = await api.call("GET", f"/violations/{incident}")
                return status == 200 and any(e["kind"] == "action" for e in body["timeline"])

            # The handler records its outcome after the webhook answered: let it, before the
            # database goes (else its record fails and the redelivery is dead-lettered).
            await until(step_0_recorded, "step 0 recorded", DEADLINE_S, interval=0.2)
            await asyncio.to_thread(pg.stop)
            due = datetime.fromisoformat(hooks_.got[0]["incident"]["next_at"])  # step 1's

            def step_1_due_and_lease_lost() -> bool:
                late = datetime.now(UTC) > due + timedelta(seconds=1)
                return late and "the lease could not be reached" in processes.log("violations")

            # Step 1 falls due while the database is down (and the leader cannot renew).
            await until(
                step_1_due_and_lease_lost,
                "step 1 due with the database down",
                DEADLINE_S,
                report=processes.logs,
            )
            status, body = await api.call("GET", f"/reservations/{booked['id']}")
            assert status == 503, body
            assert "database" in body["message"] and "5432" not in body["message"]
            assert str(pg.port) not in body["message"] and "Error" not in body["message"]
            status, health = await api.call("GET", "/health")
            assert status == 503 and health["services"]["violations"]["status"] == "error"
            await asyncio.to_thread(pg.start)
            await until(
                lambda: (incident, 1) in hooks_.steps(),
                "step 1 after the database came back",
                DEADLINE_S,
                report=processes.logs,
            )
            await asyncio.sleep(3)
            assert sorted(hooks_.steps()) == [(incident, 0), (incident, 1)]
            violations = processes.log("violations")
            # The leader cannot renew its lease without the database: it stands by (saying so
            # once, no busy loop) and leads again, reloading its state, once it is back.
            assert violations.count("the lease could not be reached") == 1, violations
            assert violations.count("the lease can be reached again") == 1, violations
            assert violations.count("escalating incidents failed") <= 1, violations
            assert "Traceback" not in violations, violations


async def test_steps_due_while_the_broker_is_stopped_go_out_once_it_is_back(
    tmp_path: Path, pg_url: str
) -> None:
    with private_rabbit() as rabbit:
        steps = ["0s webhook owner", "12s webhook owner", "14s webhook owner"]
        async with squatted_system(tmp_path, rabbit.url, pg_url, steps) as (
            processes,
            api,
            hooks_,
            _s,
            _booked,
        ):
            await until(lambda: hooks_.steps(), "step 0 delivered", DEADLINE_S)
            [(incident, _step)] = hooks_.steps()

            async def step_0_recorded() -> bool:
                status, body = await api.call("GET", f"/violations/{incident}")
                return status == 200 and any(e["kind"] == "action" for e in body["timeline"])

            await until(step_0_recorded, "step 0 recorded", DEADLINE_S, interval=0.2)
            await asyncio.to_thread(rabbit.stop)
            step_1 = datetime.fromisoformat(hooks_.got[0]["incident"]["next_at"])
            # Steps 1 and 2 fall due (2 s apart) while the broker is stopped.
            past_both = step_1 + timedelta(seconds=3) - datetime.now(UTC)
            await asyncio.sleep(max(0.0, past_both.total_seconds()))
            assert hooks_.steps() == [(incident, 0)]  # nothing went out without the broker
            await asyncio.to_thread(rabbit.start)
            late = {(incident, 1), (incident, 2)}
            await until(
                lambda: late <= set(hooks_.steps()),
                "steps 1 and 2 after the broker came back",
                DEADLINE_S,
                report=processes.logs,
            )
            await asyncio.sleep(3)  # anything sent twice would have come by now
            assert sorted(hooks_.steps()) == [(incident, 0), (incident, 1), (incident, 2)]
            violations = processes.log("violations")
            assert "Traceback" not in violations, violations
