"""The gateway's operators' view: who may read `GET /metrics` on its port, the latency of each
request by route template, and health listing every service's replicas and leader.

The app runs on aiohttp's TestServer over an in-process bus; the replicas are real `Replicas`
heartbeating on that bus.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services import SERVICE_NAMES
from services.gateway.app import create_app
from services.gateway.auth import TokenIssuer
from services.shared.bus.inproc import InProcessBus
from services.shared.cluster.replicas import Replicas
from services.shared.config import AuthSettings, GatewaySettings, Settings
from services.shared.config.metrics import MetricsSettings
from services.shared.metrics import REGISTRY
from tests.support.polling import until

# Earlier tests' series would make every scrape here slow (tests/support/metrics.py).
pytestmark = pytest.mark.usefixtures("fresh_metrics")

Client = TestClient[web.Request, web.Application]
SECRET = "s" * 40
TOKEN = "metrics-token-0123456789abcdef"


def settings(token: str = TOKEN) -> Settings:
    return Settings(
        auth=AuthSettings(jwt_secret=SECRET),
        gateway=GatewaySettings(health_timeout_s=0.2, frontend_dir="/nonexistent"),
        metrics=MetricsSettings(token=token),
        dev=True,
    )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def access_token(username: str, *, admin: bool) -> str:
    roles = ["user", "admin"] if admin else ["user"]
    return TokenIssuer(SECRET, 900).access_token({"username": username, "roles": roles})


@pytest.mark.parametrize(
    ("make_headers", "status"),
    # Made when the test runs: a token issued at collection may have expired by then.
    [
        (lambda: {}, 401),
        (lambda: bearer("not-the-token"), 401),
        (lambda: bearer(access_token("alice", admin=False)), 403),
        (lambda: bearer(access_token("root", admin=True)), 200),
        (lambda: bearer(TOKEN), 200),
        (lambda: {"Authorization": f"Basic {TOKEN}"}, 401),
    ],
    ids=["anonymous", "wrong token", "user", "admin", "metrics token", "not bearer"],
)
async def test_metrics_on_the_gateway_port_are_for_admins_and_the_token(
    bus: InProcessBus, make_headers: Callable[[], dict[str, str]], status: int
) -> None:
    async with TestClient(TestServer(create_app(settings(), bus))) as client:
        response = await client.get("/metrics", headers=make_headers())
        assert response.status == status
        if status == 200:
            assert response.content_type == "text/plain"
            assert "warden_http_request_duration_seconds" in await response.text()
        else:
            body = await response.json()  # the API's error envelope, never the metrics
            assert body["error"] in (
                "authentication_required",
                "authentication_failed",
                "forbidden",
            )
            assert TOKEN not in await response.text()


async def test_without_a_token_only_admins_read_the_metrics(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(settings(token=""), bus))) as client:
        assert (await client.get("/metrics", headers=bearer(""))).status == 401
        admin = bearer(access_token("root", admin=True))
        assert (await client.get("/metrics", headers=admin)).status == 200


async def test_each_request_is_timed_by_route_template_and_status_class(
    bus: InProcessBus,
) -> None:
    replicas = Replicas(bus, "gateway")
    labels = {"service": "gateway", "replica": replicas.replica_id}
    count = "warden_http_request_duration_seconds_count"
    async with TestClient(TestServer(create_app(settings(), bus, replicas=replicas))) as client:
        for _ in range(2):
            await client.get("/api/v1/reservations/12345")  # no token: 401
        await client.get("/api/v1/openapi.json")
        await client.post("/api/v1/session", data=b"{not json")  # 400

    template = {**labels, "method": "GET", "route": "/api/v1/reservations/{id}"}
    assert REGISTRY.get_sample_value(count, {**template, "status": "4xx"}) == 2
    assert REGISTRY.get_sample_value(count, {**template, "status": "2xx"}) is None
    spec = {**labels, "method": "GET", "route": "/api/v1/openapi.json", "status": "2xx"}
    assert REGISTRY.get_sample_value(count, spec) == 1
    session = {**labels, "method": "POST", "route": "/api/v1/session", "status": "4xx"}
    assert REGISTRY.get_sample_value(count, session) == 1


async def test_health_lists_every_replica_and_the_leader_where_one_is_elected(
    bus: InProcessBus,
) -> None:
    gateway = Replicas(bus, "gateway", heartbeat_s=0.05, dead_after_s=5)
    await gateway.watch(*SERVICE_NAMES)
    role = {"v1": "leader", "v2": "standby"}
    others = [
        Replicas(
            bus,
            "violations",
            heartbeat_s=0.05,
            replica_id="violations@h:1-v1",
            role=lambda: role["v1"],
        ),
        Replicas(
            bus,
            "violations",
            heartbeat_s=0.05,
            replica_id="violations@h:2-v2",
            role=lambda: role["v2"],
        ),
        Replicas(
            bus,
            "monitor",
            heartbeat_s=0.05,
            replica_id="monitor@h:3-m1",
            details=lambda: {"hosts": 4},
        ),
    ]
    for replica in (gateway, *others):
        replica.start()
    try:
        async with TestClient(TestServer(create_app(settings(), bus, replicas=gateway))) as client:

            async def services_when(check: Any) -> dict[str, Any] | None:
                body = await (await client.get("/api/v1/health")).json()
                return body["services"] if check(body["services"]) else None

            services = await until(
                lambda: services_when(
                    lambda s: len(s["violations"]["replicas"]) == 2 and s["monitor"]["replicas"]
                ),
                "both violations replicas and the monitor heard",
                10,
            )
            violations = services["violations"]
            assert [r["id"] for r in violations["replicas"]] == [
                "violations@h:1-v1",
                "violations@h:2-v2",
            ]
            assert [r["role"] for r in violations["replicas"]] == ["leader", "standby"]
            assert violations["leader"] == "violations@h:1-v1"
            assert violations["status"] == "unreachable"  # nobody serves its health: unchanged
            [monitor] = services["monitor"]["replicas"]
            assert monitor["details"] == {"hosts": 4} and monitor["last_heard_s"] >= 0
            assert "leader" not in services["monitor"]  # no election there
            assert services["jobs"]["replicas"] == [] and "leader" not in services["jobs"]
            [me] = services["gateway"]["replicas"]
            assert me["id"] == gateway.replica_id and me["role"] == "active"

            # The leader dies quietly; the standby takes over: health shows the change.
            await others[0].stop()
            role["v2"] = "leader"
            services = await until(
                lambda: services_when(
                    lambda s: (
                        s["violations"].get("leader") == "violations@h:2-v2"
                        and len(s["violations"]["replicas"]) == 1
                    )
                ),
                "the standby shown as the leader",
                10,
            )
    finally:
        for replica in (gateway, *others):
            await replica.stop()
