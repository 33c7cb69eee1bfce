"""Fixtures shared by every test: real servers, each test isolated in its own namespace.

RabbitMQ: each test gets its own vhost (nameko's habit), created and deleted with rabbitmqctl
(in batches: `_Vhosts`).
PostgreSQL: each test gets its own database. When a server cannot be reached the test fails
with what to do; it never skips silently (set WARDEN_TEST_AMQP_URL / WARDEN_TEST_PG_URL to
point at servers elsewhere).
sshd: each test gets its own OpenSSH sshd on a free loopback port (tests/support/sshd.py).
unix_user: a throwaway Unix user of the test's own (tests/support/unix_user.py; needs root).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator, Iterator
from urllib.parse import quote, urlsplit, urlunsplit

import pytest

from tests.support.inproc_bus import bus  # noqa: F401 (the in-process `bus` fixture, for every test)
from tests.support.metrics import fresh_metrics  # noqa: F401 (for the tests that scrape)
from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser, throwaway_user

# pytest-xdist's workers (`make test` runs two) start with COLUMNS=80 and LINES=24 in their
# environment. The `warden` tables fit $COLUMNS, so a test sees what a pipe gets, as it does
# without workers, unless it sets COLUMNS itself (tests/e2e/test_cli_tables.py).
if os.environ.get("PYTEST_XDIST_WORKER"):
    for _name in ("COLUMNS", "LINES"):
        os.environ.pop(_name, None)

AMQP_URL = os.environ.get("WARDEN_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/")
PG_URL = os.environ.get("WARDEN_TEST_PG_URL", "postgresql://postgres@127.0.0.1:5432/postgres")


def _rabbitmqctl(*args: str, check: bool = True) -> bool:
    """Run `rabbitmqctl ARGS`; whether it worked (with `check`, fail the test if not)."""
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=60)
    if done.returncode != 0 and check:
        pytest.fail(
            f"rabbitmqctl {' '.join(args)} failed ({done.stderr.strip() or done.stdout.strip()}).\n"
            + RABBITMQ_HINT,
            pytrace=False,
        )
    return done.returncode == 0


RABBITMQ_HINT = (
    "The integration tests need a running RabbitMQ: start it with `rabbitmq-server -detached` "
    "(or run .ci/run, which installs and starts it), or point WARDEN_TEST_AMQP_URL at one."
)


def _amqp_problem(url: str, timeout_s: float = 10.0) -> str | None:
    """Why no AMQP broker answers at `url`'s host and port, or None when one does.

    rabbitmqctl talks to the node another way (Erlang distribution), so it can work while
    the AMQP port does not: then each test's bus would fail with a ServiceUnavailable
    traceback. A broker answers the AMQP protocol header with its Connection.Start frame
    (frame type 1)."""
    parts = urlsplit(url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 5672
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as conn:
            conn.settimeout(timeout_s)
            conn.sendall(b"AMQP\x00\x00\x09\x01")
            first = conn.recv(1)
    except OSError as err:
        return f"{host}:{port}: {err.strerror or err}"
    if first != b"\x01":
        return f"{host}:{port} answers, but not as an AMQP 0-9-1 broker"
    return None


_answered: set[str] = set()  # AMQP URLs a broker has answered at in this run


def _shown(url: str) -> str:
    """The URL without its password."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = f"{parts.username}:***@{parts.hostname}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit(parts._replace(netloc=netloc))


def _with_vhost(url: str, vhost: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))


def _erlang_binaries(names: list[str]) -> str:
    return "[" + ",".join(f'<<"{name}">>' for name in names) + "]"


class _Vhosts:
    """Fresh vhosts, each given to one test only, made and removed in batches: rabbitmqctl
    starts an Erlang VM for each call (about 0.7 s of CPU), so one `rabbitmqctl eval` deletes
    the vhosts given back since the last batch and adds the next BATCH (with the test user's
    permissions). Where `eval` is refused (another broker version), one command a step."""

    BATCH = 8

    def __init__(self) -> None:
        self.ready: list[str] = []
        self.used: list[str] = []
        self.user = urlsplit(AMQP_URL).username or "guest"
        self.batched = re.fullmatch(r"[A-Za-z0-9_.-]+", self.user) is not None

    def take(self) -> str:
        if not self.ready:
            fresh = [f"warden-test-{uuid.uuid4().hex[:12]}" for _ in range(self.BATCH)]
            self._change(delete=self.used, add=fresh)
            self.used, self.ready = [], fresh
        return self.ready.pop()

    def give_back(self, vhost: str) -> None:
        self.used.append(vhost)

    def close(self) -> None:
        if self.used or self.ready:
            self._change(delete=self.used + self.ready, add=[])
            self.used, self.ready = [], []

    def _change(self, delete: list[str], add: list[str]) -> None:
        if self.batched:
            actor, user = '<<"warden-tests">>', f'<<"{self.user}">>'
            expression = (
                f"[rabbit_vhost:delete(V, {actor}) || V <- {_erlang_binaries(delete)}], "
                f"[begin ok = rabbit_vhost:add(V, {actor}), "
                f"ok = rabbit_auth_backend_internal:set_permissions({user}, V, "
                f'<<".*">>, <<".*">>, <<".*">>, {actor}) end || V <- {_erlang_binaries(add)}], '
                "ok."
            )
            if _rabbitmqctl("eval", expression, check=False):
                return
            self.batched = False
        for vhost in delete:
            _rabbitmqctl("delete_vhost", vhost)
        for vhost in add:
            _rabbitmqctl("add_vhost", vhost)
            _rabbitmqctl("set_permissions", "-p", vhost, self.user, ".*", ".*", ".*")


_VHOSTS = _Vhosts()


def pytest_sessionfinish() -> None:
    _VHOSTS.close()


@contextlib.contextmanager
def _fresh_vhost() -> Iterator[str]:
    """A fresh RabbitMQ vhost while it lasts (no other test gets it); the URL points at it."""
    if AMQP_URL not in _answered:  # once it has answered, no probe per test (one log line each)
        problem = _amqp_problem(AMQP_URL)
        if problem is not None:
            pytest.fail(
                f"cannot reach RabbitMQ at {_shown(AMQP_URL)} ({problem}).\n{RABBITMQ_HINT}",
                pytrace=False,
            )
        _answered.add(AMQP_URL)
    vhost = _VHOSTS.take()
    try:
        yield _with_vhost(AMQP_URL, vhost)
    finally:
        _VHOSTS.give_back(vhost)


@pytest.fixture
def amqp_url() -> Iterator[str]:
    """A fresh RabbitMQ vhost for this test; the URL points at it."""
    with _fresh_vhost() as url:
        yield url


@pytest.fixture(scope="module")
def amqp_url_module() -> Iterator[str]:
    """A fresh RabbitMQ vhost for a module's tests (one system for the module)."""
    with _fresh_vhost() as url:
        yield url


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    """A fresh PostgreSQL database for this test, as an asyncpg SQLAlchemy URL."""
    import asyncpg

    name = f"warden_test_{uuid.uuid4().hex[:12]}"
    try:
        admin = await asyncpg.connect(PG_URL)
    except (OSError, asyncpg.PostgresError) as err:
        pytest.fail(
            f"cannot reach PostgreSQL at {PG_URL} ({err}).\nThe integration tests need a "
            "running PostgreSQL: start it with `pg_ctlcluster --skip-systemctl-redirect "
            "$(ls /etc/postgresql) main start` (or run .ci/run).",
            pytrace=False,
        )
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        parts = urlsplit(PG_URL)
        yield urlunsplit(parts._replace(scheme="postgresql+asyncpg", path="/" + name))
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


@pytest.fixture
def sshd(request: pytest.FixtureRequest) -> Iterator[Sshd]:
    """A real sshd of this test's own on 127.0.0.1 (see tests/support/sshd.py), started.

    Options of `Sshd` (user, path, env, extra_config) come through indirect parametrisation:
    `@pytest.mark.parametrize("sshd", [{"user": "alice"}], indirect=True)`.
    """
    with Sshd(**getattr(request, "param", {})) as server:
        yield server


@pytest.fixture
def unix_user() -> Iterator[UnixUser]:
    """A fresh unprivileged Unix user, removed with its processes afterwards."""
    with throwaway_user() as user:
        yield user


@pytest.fixture
def cheap_passwords() -> Iterator[None]:
    """Real argon2 at cheap parameters: tests that create many accounts stay fast."""
    from tests.support import accounts

    with accounts.cheap_passwords():
        yield
