"""Every service as its own OS process (`warden run <service>`), as an admin would run them.

The processes talk through the real RabbitMQ (the test's own vhost) and keep their tables in one
real PostgreSQL database (the test's own), migrated first by `warden db upgrade` run the same
way. There is no config file: HOME and the XDG folders point into the test's temp dir and the
settings come from the defaults plus WARDEN_* variables. Each process writes its output to a log
file in the temp dir; a failure shows those logs.

Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from services import SERVICE_NAMES, __version__
from services.shared.storage.db import SERVICES_WITH_DATABASE, head_revision
from tests.support.health import Check, all_ok, health_until, only_down
from tests.support.polling import until
from tests.support.ports import free_port

pytestmark = [pytest.mark.amqp, pytest.mark.postgres, pytest.mark.timeout(300)]

WARDEN = [sys.executable, "-m", "services.cli"]
START_DEADLINE_S = 60.0
CHANGE_DEADLINE_S = 30.0
EXIT_DEADLINE_S = 30.0
BACKENDS = ("monitor", "reservations", "jobs", "violations")


@dataclass
class Fleet:
    """Warden processes started by one test; stopped (killed if need be) at teardown."""

    tmp: Path
    env: dict[str, str]
    port: int
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def log_path(self, label: str) -> Path:
        return self.tmp / "logs" / f"{label}.log"

    def warden(self, *args: str, label: str) -> subprocess.CompletedProcess[str]:
        """Run a short `warden` command to completion; its output also goes to a log file."""
        done = subprocess.run(
            [*WARDEN, *args],
            env=self.env,
            cwd=self.tmp,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        self.log_path(label).write_text(done.stdout + done.stderr)
        return done

    def start(self, *args: str, label: str) -> subprocess.Popen[bytes]:
        """Start a long-running `warden` command, its output going to its log file."""
        with self.log_path(label).open("wb") as log_file:
            process = subprocess.Popen(
                [*WARDEN, *args],
                env=self.env,
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=log_file,
                stderr=subprocess.STDOUT,
            )
        self.processes[label] = process
        return process

    def logs(self) -> str:
        parts = []
        for path in sorted((self.tmp / "logs").glob("*.log")):
            text = path.read_text(errors="replace")
            parts.append(f"--- {path.stem} ---\n{text[-4000:]}")
        return "\n".join(parts)

    def check_running(self, *labels: str) -> None:
        for label in labels:
            code = self.processes[label].poll()
            if code is not None:
                pytest.fail(f"{label} exited early with {code}\n{self.logs()}")

    async def wait_exit(self, label: str, deadline_s: float = EXIT_DEADLINE_S) -> int:
        process = self.processes[label]
        await until(
            lambda: process.poll() is not None,
            f"{label} exiting",
            deadline_s,
            interval=0.1,
            report=self.logs,
        )
        return process.returncode

    async def wait_health(
        self, want: Check, what: str, *, running: tuple[str, ...], deadline_s: float
    ) -> dict[str, Any]:
        """Poll GET /api/v1/health until `want(status, body)`; fail with the logs."""
        _status, body = await health_until(
            self.port,
            want,
            what,
            deadline_s,
            alive=lambda: self.check_running(*running),
            interval=0.25,
            report=self.logs,
        )
        return body

    def kill_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.kill()
        for process in self.processes.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)


def port_is_closed(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) != 0


def base_env(tmp: Path, **warden: str) -> dict[str, str]:
    """The real environment minus any WARDEN_* setting, with a home of the test's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    for name in ("home", "xdg-config", "xdg-data"):
        (tmp / name).mkdir()
    env.update(
        HOME=str(tmp / "home"),
        XDG_CONFIG_HOME=str(tmp / "xdg-config"),
        XDG_DATA_HOME=str(tmp / "xdg-data"),
        PYTHONUNBUFFERED="1",
        WARDEN_LOG_LEVEL="info",
        WARDEN_AUTH_JWT_SECRET=secrets.token_urlsafe(36),  # 48 characters
    )
    env.update({f"WARDEN_{key.upper()}": value for key, value in warden.items()})
    return env


@pytest.fixture
def fleet_factory(tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    made: list[Fleet] = []

    def factory(**warden: str) -> Fleet:
        port = free_port()
        env = base_env(tmp_path, gateway_port=str(port), **warden)
        (tmp_path / "logs").mkdir()
        made.append(Fleet(tmp_path, env, port))
        return made[-1]

    try:
        yield factory
    finally:
        for fleet in made:
            fleet.kill_all()


def assert_migrated(fleet: Fleet) -> None:
    done = fleet.warden("db", "upgrade", label="db-upgrade")
    assert done.returncode == 0, fleet.logs()
    for name in SERVICES_WITH_DATABASE:
        assert f"{name}: at {head_revision(name)}" in done.stdout, fleet.logs()


def assert_clean_log(fleet: Fleet, label: str) -> None:
    text = fleet.log_path(label).read_text(errors="replace")
    assert "Traceback" not in text, fleet.logs()
    assert " ERROR " not in text, fleet.logs()


async def test_each_service_in_its_own_process(
    fleet_factory: Callable[..., Fleet], amqp_url: str, pg_url: str
) -> None:
    fleet = fleet_factory(bus_amqp_url=amqp_url, storage_database_url=pg_url)
    assert_migrated(fleet)
    for name in (*BACKENDS, "gateway"):
        fleet.start("run", name, label=name)
    everyone = (*BACKENDS, "gateway")

    body = await fleet.wait_health(
        all_ok, "all five services ok", running=everyone, deadline_s=START_DEADLINE_S
    )
    assert {n: (s["status"], s["version"]) for n, s in body["services"].items()} == {
        n: ("ok", __version__) for n in SERVICE_NAMES
    }

    # A backend stopped on purpose: it exits cleanly, the gateway reports it unreachable.
    fleet.processes["jobs"].send_signal(signal.SIGTERM)
    assert await fleet.wait_exit("jobs") == 0, fleet.logs()
    still = tuple(n for n in everyone if n != "jobs")
    await fleet.wait_health(
        only_down("jobs"), "jobs unreachable", running=still, deadline_s=CHANGE_DEADLINE_S
    )

    # A backend that dies without a word (the broker notices its connection is gone).
    fleet.processes["violations"].send_signal(signal.SIGKILL)
    assert await fleet.wait_exit("violations") == -signal.SIGKILL
    still = tuple(n for n in still if n != "violations")
    await fleet.wait_health(
        only_down("jobs", "violations"),
        "jobs and violations unreachable",
        running=still,
        deadline_s=CHANGE_DEADLINE_S,
    )

    # jobs comes back as a new process and is seen again.
    fleet.start("run", "jobs", label="jobs-again")
    still = (*still, "jobs-again")
    await fleet.wait_health(
        only_down("violations"), "jobs back", running=still, deadline_s=START_DEADLINE_S
    )

    # Everything left stops cleanly on SIGTERM.
    for label in still:
        fleet.processes[label].send_signal(signal.SIGTERM)
    for label in still:
        assert await fleet.wait_exit(label) == 0, fleet.logs()
    for label in (*still, "jobs"):
        assert_clean_log(fleet, label)
    assert port_is_closed(fleet.port)


async def test_a_service_refuses_an_unmigrated_database(
    fleet_factory: Callable[..., Fleet], amqp_url: str, pg_url: str
) -> None:
    fleet = fleet_factory(bus_amqp_url=amqp_url, storage_database_url=pg_url)

    fleet.start("run", "reservations", label="reservations")

    assert await fleet.wait_exit("reservations") == 1, fleet.logs()
    text = fleet.log_path("reservations").read_text()
    assert "warden db upgrade" in text, fleet.logs()
    assert "Traceback" not in text, fleet.logs()  # a message, not a crash


async def test_sigterm_while_waiting_for_rabbitmq_exits_cleanly(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory(bus_amqp_url=f"amqp://guest:guest@127.0.0.1:{free_port()}/")
    assert_migrated(fleet)
    fleet.start("run", "jobs", label="jobs")
    log_path = fleet.log_path("jobs")

    def retrying() -> bool:
        fleet.check_running("jobs")
        return "retrying" in log_path.read_text(errors="replace")

    await until(retrying, "jobs retrying", START_DEADLINE_S, interval=0.1, report=fleet.logs)

    fleet.processes["jobs"].send_signal(signal.SIGTERM)

    # 0: it stopped because it was asked to, not because it gave up on the broker (1).
    assert await fleet.wait_exit("jobs", deadline_s=60) == 0, fleet.logs()


async def test_all_services_in_one_process_on_the_embedded_defaults(
    fleet_factory: Callable[..., Fleet],
) -> None:
    fleet = fleet_factory()  # in-process bus, one SQLite file per service under XDG_DATA_HOME
    assert_migrated(fleet)

    fleet.start("run", "all", label="all")

    await fleet.wait_health(
        all_ok, "all five services ok", running=("all",), deadline_s=START_DEADLINE_S
    )
    fleet.processes["all"].send_signal(signal.SIGTERM)
    assert await fleet.wait_exit("all") == 0, fleet.logs()
    assert_clean_log(fleet, "all")
    data_dir = fleet.tmp / "xdg-data" / "warden"
    assert {p.name for p in data_dir.glob("*.db")} == {f"{n}.db" for n in SERVICES_WITH_DATABASE}
