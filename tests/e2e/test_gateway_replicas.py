"""Several gateway replicas behind one address, as separate OS processes: two gateways and two
reservations replicas on the real RabbitMQ (the module's own vhost) and PostgreSQL (its own
database), and Debian's nginx in front with examples/nginx/warden-gateways.conf.

- The first admin is made with the set-up link one gateway printed, posted to the other.
- Signing in on one gateway, refreshing on the other and logging out on the first all work;
  the ended session's access token is refused by both.
- Failed logins spread over both gateways share one budget (the reservations database counts).
- The live stream resumed on the other gateway gets what was missed (some events again, which
  the client drops by event_id), or one reset; never a gap.
- Through nginx: a gateway killed with -9 is replaced by the other one for the next requests,
  and a stream that was on it resumes on the other with the missed events.

Deadlines are generous and nothing asserts how long anything took.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import aiohttp
import pytest
import pytest_asyncio

from services.gateway import setup_link
from tests.e2e.test_separate_processes import WARDEN, base_env
from tests.support.polling import until
from tests.support.ports import free_port

pytestmark = [
    pytest.mark.amqp,
    pytest.mark.postgres,
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(300),
]

API = "/api/v1"
START_DEADLINE_S = 90.0
DEADLINE_S = 30.0
PG_URL = os.environ.get("WARDEN_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
EXAMPLE = Path(__file__).parents[2] / "examples" / "nginx" / "warden-gateways.conf"
WINDOW_S = 1.0  # [gateway] stream_resume_window_s here: the stream resumes need that much past
PASSWORD = "a-long-test-password-1"


def nginx_binary() -> str:
    found = os.environ.get("WARDEN_TEST_NGINX") or shutil.which("nginx")
    if not found and Path("/usr/sbin/nginx").exists():
        found = "/usr/sbin/nginx"
    if not found:
        pytest.fail(
            "nginx not found: `apt-get install nginx-core` (or set WARDEN_TEST_NGINX to an nginx "
            "binary; .ci/run does)",
            pytrace=False,
        )
    return found


@dataclass
class Replicas:
    tmp: Path
    env: dict[str, str]
    session: aiohttp.ClientSession
    gateways: dict[str, int] = field(default_factory=dict)  # label -> port
    proxy_port: int = 0
    processes: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def log(self, label: str) -> Path:
        return self.tmp / "logs" / f"{label}.log"

    def start(self, label: str, *args: str, **env: str) -> None:
        with self.log(label).open("wb") as out:
            self.processes[label] = subprocess.Popen(
                args if args[0] != "warden" else [*WARDEN, *args[1:]],
                env={**self.env, **env},
                cwd=self.tmp,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def logs(self) -> str:
        return "\n".join(
            f"--- {path.stem} ---\n{path.read_text(errors='replace')[-3000:]}"
            for path in sorted((self.tmp / "logs").glob("*.log"))
        )

    def url(self, label: str) -> str:
        port = self.proxy_port if label == "proxy" else self.gateways[label]
        return f"http://127.0.0.1:{port}{API}"

    async def request(
        self, label: str, method: str, path: str, body: Any = None, token: str | None = None
    ) -> tuple[int, Any, dict[str, str]]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        async with self.session.request(
            method, self.url(label) + path, json=body, headers=headers
        ) as response:
            text = await response.text()
            answer = json.loads(text) if text else None
            return response.status, answer, dict(response.headers)

    async def login(self, label: str, username: str, password: str = PASSWORD) -> dict[str, Any]:
        status, body, _ = await self.request(
            label, "POST", "/session", {"username": username, "password": password}
        )
        assert status == 201, body
        return dict(body)

    def kill(self, label: str) -> None:
        process = self.processes[label]
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)

    def stop_all(self) -> None:
        for process in self.processes.values():
            if process.poll() is None:
                process.terminate()
        for process in self.processes.values():
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=10)


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def pg_database() -> AsyncIterator[str]:
    import asyncpg

    name = f"warden_test_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(PG_URL)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(PG_URL)
        yield urlunsplit(parts._replace(scheme="postgresql+asyncpg", path="/" + name))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


def nginx_config(tmp: Path, proxy_port: int, gateways: list[int]) -> Path:
    """examples/nginx/warden-gateways.conf with this test's ports, in a minimal nginx.conf."""
    example = EXAMPLE.read_text()
    example = example.replace("127.0.0.1:8080", f"127.0.0.1:{gateways[0]}")
    example = example.replace("127.0.0.1:8081", f"127.0.0.1:{gateways[1]}")
    example = example.replace("listen 80;", f"listen 127.0.0.1:{proxy_port};")
    (tmp / "nginx").mkdir()
    (tmp / "nginx" / "warden.conf").write_text(example)
    user = "user root root;\n" if os.geteuid() == 0 else ""
    temp = "\n".join(
        f"    {kind}_temp_path {tmp / 'nginx' / kind};"
        for kind in ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")
    )
    config = tmp / "nginx" / "nginx.conf"
    config.write_text(
        f"{user}worker_processes 1;\npid {tmp / 'nginx' / 'nginx.pid'};\n"
        f"error_log {tmp / 'logs' / 'nginx-error.log'} warn;\n"
        "events { worker_connections 256; }\n"
        f"http {{\n    access_log off;\n{temp}\n    include {tmp / 'nginx' / 'warden.conf'};\n}}\n"
    )
    return config


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory, amqp_url_module: str, pg_database: str
) -> AsyncIterator[Replicas]:
    nginx = nginx_binary()
    tmp = tmp_path_factory.mktemp("gateway-replicas")
    (tmp / "logs").mkdir()
    env = base_env(
        tmp,
        bus_amqp_url=amqp_url_module,
        storage_database_url=pg_database,
        gateway_trusted_proxies="127.0.0.1",
        gateway_stream_resume_window_s=str(WINDOW_S),
    )
    async with aiohttp.ClientSession() as session:
        replicas = Replicas(tmp, env, session)
        try:
            done = await asyncio.to_thread(
                subprocess.run,
                [*WARDEN, "db", "upgrade"],
                env=env,
                cwd=tmp,
                capture_output=True,
                timeout=120,
            )
            assert done.returncode == 0, done.stderr
            replicas.start("reservations-1", "warden", "run", "reservations")
            replicas.start("reservations-2", "warden", "run", "reservations")
            for label in ("gateway-a", "gateway-b"):
                port = replicas.gateways[label] = free_port()
                replicas.start(label, "warden", "run", "gateway", WARDEN_GATEWAY_PORT=str(port))
            replicas.proxy_port = free_port()
            config = nginx_config(tmp, replicas.proxy_port, list(replicas.gateways.values()))
            replicas.start(
                "nginx", nginx, "-p", str(tmp / "nginx"), "-c", str(config), "-g", "daemon off;"
            )
            await until(
                lambda: all(
                    setup_link.LINK_PREFIX in replicas.log(label).read_text(errors="replace")
                    for label in replicas.gateways
                ),
                "both gateways printing their set-up links",
                START_DEADLINE_S,
                interval=0.25,
                report=replicas.logs,
            )
            yield replicas
        finally:
            replicas.stop_all()


def printed_token(replicas: Replicas, label: str) -> str:
    text = replicas.log(label).read_text(errors="replace")
    line = next(line for line in text.splitlines() if line.startswith(setup_link.LINK_PREFIX))
    return parse_qs(urlsplit(line.removeprefix(setup_link.LINK_PREFIX)).query)["token"][0]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def admin(system: Replicas) -> str:
    """The first admin, made with gateway a's set-up link through gateway b; its token."""
    status, body, _ = await system.request(
        "gateway-b",
        "POST",
        "/setup",
        {"token": printed_token(system, "gateway-a"), "username": "root", "password": PASSWORD},
    )
    assert status == 201, (body, system.logs())
    for name in ("alice", "mallory"):
        made, answer, _ = await system.request(
            "gateway-a",
            "POST",
            "/users",
            {"username": name, "email": f"{name}@lab.example", "password": PASSWORD},
            body["access_token"],
        )
        assert made == 201, answer
    return str(body["access_token"])


async def test_the_setup_link_of_one_gateway_works_on_the_other_once(
    system: Replicas, admin: str
) -> None:
    # Made above with a's token through b; b's own token now finds an admin there.
    status, body, _ = await system.request(
        "gateway-a",
        "POST",
        "/setup",
        {"token": printed_token(system, "gateway-b"), "username": "root2", "password": PASSWORD},
    )
    assert status in (403, 409), body
    state = await system.request("gateway-b", "GET", "/setup")
    assert state[1] == {"needed": False}


async def test_sign_in_on_one_replica_refresh_on_the_other_logout_on_the_first(
    system: Replicas, admin: str
) -> None:
    tokens = await system.login("gateway-a", "alice")
    me = await system.request("gateway-b", "GET", "/me", token=tokens["access_token"])
    assert me[0] == 200 and me[1]["user"]["username"] == "alice"

    status, renewed, _ = await system.request(
        "gateway-b", "POST", "/session/refresh", {"refresh_token": tokens["refresh_token"]}
    )
    assert status == 201 or status == 200, renewed
    assert renewed["refresh_token"] != tokens["refresh_token"]

    status, _, _ = await system.request(
        "gateway-a",
        "POST",
        "/session/logout",
        {"refresh_token": renewed["refresh_token"]},
        token=renewed["access_token"],
    )
    assert status == 204
    # The session is over on every replica: its refresh token and (once the revocation
    # event reaches b) its access token.
    again = await system.request(
        "gateway-b", "POST", "/session/refresh", {"refresh_token": renewed["refresh_token"]}
    )
    assert again[0] == 401, again[1]
    assert (await system.request("gateway-a", "GET", "/me", token=renewed["access_token"]))[
        0
    ] == 401

    async def refused_on_b() -> bool:
        answer = await system.request("gateway-b", "GET", "/me", token=renewed["access_token"])
        assert answer[0] in (200, 401), answer[1]
        return answer[0] == 401

    await until(refused_on_b, "b refusing the ended session's token", DEADLINE_S, interval=0.2)


async def test_failed_logins_spread_over_the_replicas_share_one_budget(
    system: Replicas, admin: str
) -> None:
    limit = 5  # [gateway] login_failures_per_user
    labels = ["gateway-a", "gateway-b"] * (2 * limit)
    answers = await asyncio.gather(
        *(
            system.request(label, "POST", "/session", {"username": "mallory", "password": "guess"})
            for label in labels
        )
    )
    statuses = sorted(status for status, _, _ in answers)
    assert statuses == [401] * limit + [429] * (len(labels) - limit), statuses
    refused = next(body for status, body, _ in answers if status == 429)
    assert refused["details"]["retry_after_s"] > 0
    # Even the right password waits now, on either replica.
    for label in ("gateway-a", "gateway-b"):
        right = await system.request(
            label, "POST", "/session", {"username": "mallory", "password": PASSWORD}
        )
        assert right[0] == 429, right[1]


class Stream:
    """An open SSE connection, parsed as it comes: (id, event, payload)."""

    def __init__(self, response: aiohttp.ClientResponse) -> None:
        self.response = response

    async def next(self, timeout: float = DEADLINE_S) -> tuple[str, str, dict[str, Any]]:
        async def read() -> tuple[str, str, dict[str, Any]]:
            fields: dict[str, str] = {}
            while True:
                line = (await self.response.content.readline()).decode().rstrip("\n")
                if line == "" and "event" in fields:
                    return fields.get("id", ""), fields["event"], json.loads(fields["data"])
                if line == "":
                    fields = {}
                elif not line.startswith(":"):
                    name, _, value = line.partition(": ")
                    fields[name] = value

        return await asyncio.wait_for(read(), timeout)

    async def users_until(self, wanted: set[str]) -> tuple[list[str], str]:
        """Usernames of user.created events, each once (duplicates dropped by event_id, as the
        web UI does), until `wanted` came; with the last SSE id. Fails on a reset."""
        seen: dict[str, str] = {}
        last = ""
        while not wanted <= set(seen.values()):
            event_id, event, payload = await self.next()
            assert event != "reset", "a reset where the missed events were expected"
            if event == "user.created":
                seen.setdefault(payload["event_id"], payload["data"]["username"])
                last = event_id
        return list(seen.values()), last

    def close(self) -> None:
        self.response.close()


async def open_stream(
    system: Replicas, label: str, token: str, last_id: str | None = None
) -> tuple[Stream, dict[str, str]]:
    headers = {"Authorization": f"Bearer {token}"}
    if last_id:
        headers["Last-Event-ID"] = last_id
    response = await system.session.get(
        system.url(label) + "/stream",
        params={"topics": "users"},
        headers=headers,
        timeout=aiohttp.ClientTimeout(total=None, sock_read=None),
    )
    assert response.status == 200, await response.text()
    return Stream(response), dict(response.headers)


async def add_users(system: Replicas, label: str, admin: str, *names: str) -> None:
    for name in names:
        status, body, _ = await system.request(
            label,
            "POST",
            "/users",
            {"username": name, "email": f"{name}@lab.example", "password": PASSWORD},
            admin,
        )
        assert status == 201, body


async def test_the_stream_resumes_on_the_other_replica_with_what_was_missed(
    system: Replicas, admin: str
) -> None:
    await asyncio.sleep(WINDOW_S)  # both replicas' buffers reach back a whole window
    first, _ = await open_stream(system, "gateway-a", admin)
    await add_users(system, "gateway-a", admin, "u1")
    _, last_id = await first.users_until({"u1"})
    first.close()
    await add_users(system, "gateway-a", admin, "u2", "u3")  # missed while away
    resumed, _ = await open_stream(system, "gateway-b", admin, last_id)
    try:
        await add_users(system, "gateway-b", admin, "u4")
        names, _ = await resumed.users_until({"u2", "u3", "u4"})
        # u1 (and users made just before it) may come again: they arrived within the window.
        assert names.index("u2") < names.index("u3") < names.index("u4")
        assert set(names) <= {"alice", "mallory", "u1", "u2", "u3", "u4"}
    finally:
        resumed.close()


async def test_an_event_the_other_replica_never_had_gets_one_reset(
    system: Replicas, admin: str
) -> None:
    stream, _ = await open_stream(system, "gateway-b", admin, f"0badc0de-7-{uuid.uuid4()}")
    try:
        _, event, payload = await stream.next()
        assert event == "reset" and "reload" in payload["reason"]
    finally:
        stream.close()


async def test_through_nginx_a_killed_gateway_is_replaced_by_the_other(
    system: Replicas, admin: str
) -> None:
    tokens = await system.login("proxy", "alice")
    await asyncio.sleep(WINDOW_S)
    stream, headers = await open_stream(system, "proxy", admin)
    served_by = headers["X-Warden-Upstream"]
    victim = next(
        label for label, port in system.gateways.items() if served_by.endswith(f":{port}")
    )
    survivor = next(label for label in system.gateways if label != victim)
    await add_users(system, "proxy", admin, "p1")
    _, last_id = await stream.users_until({"p1"})

    system.kill(victim)  # kill -9: its stream breaks off, its port refuses connections
    with contextlib.suppress(Exception):
        while True:
            await stream.next(timeout=10)
    stream.close()
    await add_users(system, survivor, admin, "p2", "p3")  # missed while reconnecting

    # The next requests through the proxy succeed on the other replica, signed in as before.
    for _ in range(4):
        status, body, answer_headers = await system.request(
            "proxy", "GET", "/me", token=tokens["access_token"]
        )
        assert status == 200, body
        assert answer_headers["X-Warden-Upstream"].endswith(f":{system.gateways[survivor]}")
    renewed = await system.request(
        "proxy", "POST", "/session/refresh", {"refresh_token": tokens["refresh_token"]}
    )
    assert renewed[0] in (200, 201), renewed[1]

    resumed, headers = await open_stream(system, "proxy", admin, last_id)
    try:
        assert headers["X-Warden-Upstream"].endswith(f":{system.gateways[survivor]}")
        names, _ = await resumed.users_until({"p2", "p3"})
        assert names.index("p2") < names.index("p3")
    finally:
        resumed.close()
