"""A whole embedded Warden behind its HTTP API, for the gateway's end-to-end tests.

`running_system()` starts the simulated fleet (served over real SSH), every service on the
in-process bus as `warden run all` does, and the gateway on a free loopback port; the accounts
admin, alice and bob exist (password `pw-12345678`). `ApiClient` is a thin aiohttp client that
signs in as one of them. Deadlines are generous; nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
from argon2 import PasswordHasher

from services.reservations import passwords
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings, load_settings
from services.shared.runtime import run_services
from services.sim.model import SimFleet
from services.sim.server import SimServer
from tests.e2e.system import DEADLINE_S, create_accounts, discovered_gpu, stopped, toml
from tests.support.polling import until
from tests.support.ports import free_port

PASSWORD = "pw-12345678"
API = "/api/v1"


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
    tmp_path: Path, *, hosts: int = 2, gpus: int = 4, extra_config: tuple[str, ...] = ()
) -> AsyncIterator[ApiSystem]:
    """Every service and the gateway, in this process, against a simulated fleet."""
    cheap = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    saved_hasher = passwords._hasher
    passwords._hasher = cheap
    passwords._dummy_hash.cache_clear()
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = tmp_path / "warden_key"
    key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    fleet = SimFleet(hosts, gpus, seed=5, churn=False)
    try:
        async with SimServer(fleet, authorized_keys=[key.convert_to_public()]) as server:
            known_hosts = tmp_path / "known_hosts"
            known_hosts.write_text("\n".join(server.known_hosts_lines()) + "\n")
            port = free_port()
            lines = [
                "[storage]",
                f"data_dir = {toml(str(tmp_path / 'data'))}",
                "[auth]",
                f"jwt_secret = {toml(secrets.token_urlsafe(48))}",
                "[gateway]",
                f"port = {port}",
                f"frontend_dir = {toml(str(tmp_path / 'no-frontend'))}",
                "[ssh]",
                f"known_hosts = {toml(str(known_hosts))}",
                f"key_file = {toml(str(key_file))}",
                "[monitor]",
                "interval_s = 0.5",
                'local_nvml = "off"',
                "[jobs]",
                "poll_interval_s = 0.3",
                "int_grace_s = 1.0",
                "term_grace_s = 1.0",
                *extra_config,
            ]
            for host in server.hosts_config("warden", key_file):
                lines.append("[[hosts]]")
                lines += [f"{k} = {toml(v)}" for k, v in host.items()]
            config = tmp_path / "warden.toml"
            config.write_text("\n".join(lines) + "\n")
            settings = load_settings(config, environ={"HOME": str(tmp_path)})
            await create_accounts(settings)
            bus = InProcessBus()
            stop = asyncio.Event()
            services = ["monitor", "reservations", "jobs", "violations", "gateway"]
            running = asyncio.create_task(
                run_services(services, settings, bus_kind="inproc", bus=bus, stop=stop)
            )
            base = f"http://127.0.0.1:{port}"
            try:
                async with aiohttp.ClientSession() as session:
                    system = ApiSystem(base, settings, fleet, bus, session, {})
                    await system.until(lambda: _answers(session, base, running), "the gateway")
                    yield system
            finally:
                stop.set()
                await stopped(running)
    finally:
        passwords._hasher = saved_hasher
        passwords._dummy_hash.cache_clear()


async def _answers(session: aiohttp.ClientSession, base: str, running: asyncio.Task[None]) -> bool:
    if running.done():
        running.result()  # a service failed to start: its error, not a timeout
    try:
        async with session.get(base + API + "/health") as response:
            return response.status == 200
    except aiohttp.ClientError:
        return False
