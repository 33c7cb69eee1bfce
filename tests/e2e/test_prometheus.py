"""A real Prometheus scrapes every Warden service, each its own OS process, as an operator runs it.

The services run as `warden run <service>` (two monitor replicas) against the real RabbitMQ
(the test's vhost) and PostgreSQL (the test's database); each serves `/metrics` on a port of
its own (`WARDEN_METRICS_PORT`), and the gateway also on its own port to the `[metrics] token`.
Debian's `prometheus` (apt-get install prometheus; .ci/run installs it) is started on a free
port with a generated config scraping all of them every second; its HTTP API must show every
target up, the Warden metrics with values from each replica, and every query of the Grafana
dashboard (docker/grafana/warden-dashboard.json) evaluating without an error.

Deadlines are generous; nothing asserts how long anything took.
"""

from __future__ import annotations

import json
import secrets
import shutil
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from services import SERVICE_NAMES
from tests.e2e.test_separate_processes import BACKENDS, Fleet, assert_migrated, base_env
from tests.support.health import all_ok
from tests.support.polling import until
from tests.support.ports import free_port

pytestmark = [
    pytest.mark.amqp,
    pytest.mark.postgres,
    pytest.mark.timeout(300),
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="Prometheus is not installed (apt-get install prometheus; .ci/run does)",
    ),
]

DEADLINE_S = 90.0
TOKEN = secrets.token_urlsafe(32)
DASHBOARD = Path(__file__).resolve().parents[2] / "docker/grafana/warden-dashboard.json"
# (label, service) of every Warden process: two monitor replicas.
PROCESSES = (
    ("reservations", "reservations"),
    ("monitor-1", "monitor"),
    ("monitor-2", "monitor"),
    ("jobs", "jobs"),
    ("violations", "violations"),
    ("gateway", "gateway"),
)


def distinct_ports(count: int) -> list[int]:
    ports: set[int] = set()
    while len(ports) < count:
        ports.add(free_port())
    return sorted(ports)


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], int]]:
    """Start Prometheus with a config; its port. Killed at the end."""
    started: list[subprocess.Popen[bytes]] = []

    def start(config: dict[str, Any]) -> int:
        port = free_port()
        (tmp_path / "prometheus.yml").write_text(yaml.safe_dump(config))
        log = (tmp_path / "logs" / "prometheus.log").open("wb")
        started.append(
            subprocess.Popen(
                [
                    "prometheus",
                    f"--config.file={tmp_path / 'prometheus.yml'}",
                    f"--storage.tsdb.path={tmp_path / 'prometheus-data'}",
                    f"--web.listen-address=127.0.0.1:{port}",
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        )
        return port

    try:
        yield start
    finally:
        for process in started:
            process.kill()
            process.wait(timeout=10)


async def test_prometheus_scrapes_every_replica_of_every_service(  # noqa: C901 - one scenario checking every service's targets
    tmp_path: Path,
    amqp_url: str,
    pg_url: str,
    prometheus_factory: Callable[[dict[str, Any]], int],
) -> None:
    gateway_port, *metrics_ports = distinct_ports(len(PROCESSES) + 1)
    (tmp_path / "logs").mkdir()
    env = base_env(
        tmp_path,
        gateway_port=str(gateway_port),
        bus_amqp_url=amqp_url,
        storage_database_url=pg_url,
        monitor_local_nvml="on",  # each monitor polls this machine: polls to count
        monitor_interval_s="0.5",
        metrics_token=TOKEN,
        replicas_heartbeat_s="0.5",
    )
    fleet = Fleet(tmp_path, env, gateway_port)
    try:
        assert_migrated(fleet)
        targets = {}
        for (label, service), port in zip(PROCESSES, metrics_ports, strict=True):
            fleet.env = {**env, "WARDEN_METRICS_PORT": str(port)}
            fleet.start("run", service, label=label)
            targets[label] = f"127.0.0.1:{port}"
        labels = tuple(label for label, _ in PROCESSES)

        def two_monitors(status: int, body: dict[str, Any]) -> bool:
            return all_ok(status, body) and len(body["services"]["monitor"]["replicas"]) == 2

        await fleet.wait_health(
            two_monitors, "every service ok, two monitors", running=labels, deadline_s=DEADLINE_S
        )

        port = prometheus_factory(
            {
                "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                "scrape_configs": [
                    {"job_name": "warden", "static_configs": [{"targets": list(targets.values())}]},
                    {
                        "job_name": "warden-gateway-port",
                        "authorization": {"type": "Bearer", "credentials": TOKEN},
                        "static_configs": [{"targets": [f"127.0.0.1:{gateway_port}"]}],
                    },
                ],
            }
        )
        api = f"http://127.0.0.1:{port}/api/v1"

        def logs() -> str:
            return fleet.logs()

        async with aiohttp.ClientSession() as session:

            async def get(path: str, **params: str) -> Any:
                fleet.check_running(*labels)
                try:
                    async with session.get(f"{api}/{path}", params=params) as response:
                        return await response.json()
                except (aiohttp.ClientError, ValueError):
                    return None  # Prometheus still starting

            async def all_up() -> list[dict[str, Any]] | None:
                answer = await get("targets")
                active = (answer or {}).get("data", {}).get("activeTargets", [])
                ok = len(active) == len(targets) + 1 and all(t["health"] == "up" for t in active)
                return active if ok else None

            await until(all_up, "every target up in Prometheus", DEADLINE_S, report=logs)

            async def query(expr: str) -> list[dict[str, Any]]:
                answer = await get("query", query=expr)
                assert answer is not None and answer["status"] == "success", (expr, answer)
                result: list[dict[str, Any]] = answer["data"]["result"]
                return result

            async def by(expr: str, label: str) -> dict[str, float] | None:
                result = await query(expr)
                found = {r["metric"].get(label, ""): float(r["value"][1]) for r in result}
                return found or None

            # Every replica reports itself: two monitors, one of each other service.
            replicas = await until(
                lambda: by('count by (service) (warden_replica_info{job="warden"})', "service"),
                "replica info of every service",
                DEADLINE_S,
            )
            assert replicas == {name: (2.0 if name == "monitor" else 1.0) for name in SERVICE_NAMES}

            async def wanted(
                expr: str, label: str, check: Callable[[dict[str, float]], bool]
            ) -> Any:
                async def found() -> dict[str, float] | None:
                    values = await by(expr, label)
                    return values if values is not None and check(values) else None

                return await until(found, expr, DEADLINE_S, report=logs)

            # Both monitor replicas poll and time their polls and samples.
            for metric in ("warden_poll_duration_seconds_count", "warden_sample_age_seconds_count"):
                await wanted(
                    f'{metric}{{service="monitor"}}',
                    "replica",
                    lambda v: len(v) == 2 and all(n > 0 for n in v.values()),
                )
            await wanted(
                'warden_hosts_polled{service="monitor"}',
                "replica",
                lambda v: len(v) == 2 and all(n >= 1 for n in v.values()),
            )
            # The gateway asked every backend for its health: both sides timed it.
            await wanted(
                'sum by (service) (warden_rpc_server_duration_seconds_count{method="health"})',
                "service",
                lambda v: set(BACKENDS) <= v.keys(),
            )
            await wanted(
                'sum by (target) (warden_rpc_client_duration_seconds_count{service="gateway"})',
                "target",
                lambda v: set(BACKENDS) <= v.keys(),
            )
            await wanted(
                'warden_http_request_duration_seconds_count{route="/api/v1/health",status="2xx"}',
                "service",
                lambda v: v.get("gateway", 0) > 0,
            )
            # Heartbeats are events: every service published them, the gateway consumed them.
            await wanted(
                'sum by (service) (warden_events_published_total{type="replica.heartbeat"})',
                "service",
                lambda v: set(SERVICE_NAMES) <= v.keys(),
            )
            # Queue depths by passive declare on the real broker; outbox backlogs from the DB.
            await wanted(
                "max by (queue) (warden_queue_messages)",
                "queue",
                lambda v: "rpc-reservations" in v and any(".dead-letter" in q for q in v),
            )
            await wanted(
                "max by (service) (warden_outbox_backlog)",
                "service",
                lambda v: {"reservations", "jobs", "violations"} <= v.keys(),
            )
            await wanted(
                'warden_replicas_live{service="gateway",of="monitor"}',
                "of",
                lambda v: v == {"monitor": 2.0},
            )
            # The gateway's own port, read with the token, serves the same process's metrics.
            await wanted(
                'count by (job) (warden_replica_info{job="warden-gateway-port"})',
                "job",
                lambda v: v == {"warden-gateway-port": 1.0},
            )

            # Every query of the dashboard evaluates (Grafana fills in the rate interval).
            dashboard = json.loads(DASHBOARD.read_text())
            for panel in dashboard["panels"]:
                for target in panel.get("targets", []):
                    await query(target["expr"].replace("$__rate_interval", "1m"))
    finally:
        fleet.kill_all()
