"""A whole embedded Warden behind its HTTP API, for the gateway's end-to-end tests.

`running_system()` starts the simulated fleet (served over real SSH), every service on the
in-process bus as `warden run all` does, and the gateway on a free loopback port; the accounts
admin, alice and bob exist (password `pw-12345678`). `ApiClient` is a thin aiohttp client that
signs in as one of them. Deadlines are generous; nothing asserts how long anything took.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings
from services.sim.model import SimFleet
from tests.support.accounts import PASSWORD, cheap_passwords
from tests.support.config import merged
from tests.support.fleet import served_fleet
from tests.support.polling import until
from tests.support.ports import free_port
from tests.support.system import (
    DEADLINE_S,
    Services,
    discovered_gpu,
    running_services,
    system_settings,
)

API = "/api/v1"
EVERY_SERVICE = ["monitor", "reservations", "jobs", "violations", "gateway"]


@dataclass
class Response:
    status: int
    body: Any
    headers: Any


class ApiClient:
    """Requests to the API as one user (or nobody); answers as (status, parsed JSON)."""

    def __init__(self, base: str, session: aiohttp.ClientSession, token: str | None = None):
        self.base = base
        self.session = session
        self.token = token

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    async def request(
        self,
        method: str,
        path: str,
        json: Any = None,
        params: Any = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        async with self.session.request(
            method,
            self.base + API + path,
            json=json,
            params=params,
            headers={**self.headers(), **(headers or {})},
        ) as response:
            text = await response.text()
            body: Any = text
            if response.content_type == "application/json" and text:
                body = await response.json()
            return Response(response.status, body, response.headers)

    async def get(self, path: str, **params: Any) -> Response:
        return await self.request("GET", path, params=params or None)

    async def post(self, path: str, json: Any = None) -> Response:
        return await self.request("POST", path, json=json)

    async def patch(self, path: str, json: Any = None) -> Response:
        return await self.request("PATCH", path, json=json)

    async def put(self, path: str, json: Any = None) -> Response:
        return await self.request("PUT", path, json=json)

    async def delete(self, path: str, **params: Any) -> Response:
        return await self.request("DELETE", path, params=params or None)


@dataclass
class ApiSystem:
    base: str  # http://127.0.0.1:PORT
    settings: Settings
    fleet: SimFleet
    bus: InProcessBus
    session: aiohttp.ClientSession
    tokens: dict[str, str]

    def anonymous(self) -> ApiClient:
        return ApiClient(self.base, self.session)

    async def as_user(self, username: str) -> ApiClient:
        """A client signed in as `username` (one login per user per system)."""
        if username not in self.tokens:
            answer = await self.anonymous().post(
                "/session", {"username": username, "password": PASSWORD}
            )
            assert answer.status == 201, answer.body
            self.tokens[username] = answer.body["access_token"]
        return ApiClient(self.base, self.session, self.tokens[username])

    async def gpu(self, host_index: int, gpu_index: int) -> dict[str, Any]:
        """A GPU of the fleet once the reservations service knows it (uuid, host, index)."""
        return await discovered_gpu(self.bus, self.fleet.hosts[host_index], gpu_index)

    async def until(self, condition: Callable[[], Awaitable[Any]], what: str) -> Any:
        return await until(condition, what, DEADLINE_S, interval=0.1)


@contextlib.asynccontextmanager
async def running_system(
    tmp_path: Path,
    *,
    hosts: int = 2,
    gpus: int = 4,
    config: Mapping[str, Any] | None = None,
    services: Sequence[str] = EVERY_SERVICE,
    topology: str | None = None,
) -> AsyncIterator[ApiSystem]:
    """Every service (or `services`) and the gateway, in this process, against a simulated
    fleet (its hosts' `topology`, default pcie); `config`: sections merged over the config
    (e.g. `{"violations": {"steps": [...]}}`)."""
    fleet = SimFleet(hosts, gpus, seed=5, churn=False, topology=topology)
    with cheap_passwords():
        async with served_fleet(fleet, tmp_path) as served:
            # Picked once the simulated hosts hold their ports (bound to port 0, they could
            # be given the very port picked before).
            port = free_port()
            sections = {
                "gateway": {"port": port, "frontend_dir": str(tmp_path / "no-frontend")},
                "monitor": {"interval_s": 0.5},
                "jobs": {"poll_interval_s": 0.3, "int_grace_s": 1.0, "term_grace_s": 1.0},
            }
            settings = await system_settings(tmp_path, served, **merged(sections, config or {}))
            bus = InProcessBus()
            base = f"http://127.0.0.1:{port}"
            async with (
                running_services(list(services), settings, "inproc", bus) as started,
                aiohttp.ClientSession() as session,
            ):
                system = ApiSystem(base, settings, fleet, bus, session, {})
                await system.until(
                    lambda: _answers(session, base, started, services), "the gateway"
                )
                yield system


async def _answers(
    session: aiohttp.ClientSession, base: str, services: Services, names: Sequence[str]
) -> bool:
    """Every service started answers the health check (those left out are down)."""
    if services.task is not None and services.task.done():
        services.task.result()  # a service failed to start: its error, not a timeout
    try:
        async with session.get(base + API + "/health") as response:
            if response.status == 200:
                return True
            found = (await response.json()).get("services", {})
            return all(found.get(name, {}).get("status") == "ok" for name in names)
    except aiohttp.ClientError:
        return False
