"""`warden run` when what it needs is not there, as an admin meets it: a broker that accepts
TCP but never answers, a database nobody listens for, a gateway port someone else holds.

Each runs `warden` as its own OS process. It must stop on SIGTERM at any point, and fail with
one clear line (no traceback) when it gives up. Nothing asserts how long anything took beyond
generous deadlines.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port

WARDEN = [sys.executable, "-m", "services.cli"]


def env_for(tmp: Path, **settings: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    env.update(
        HOME=str(tmp),
        XDG_CONFIG_HOME=str(tmp / "config"),
        XDG_DATA_HOME=str(tmp / "data"),
        WARDEN_AUTH_JWT_SECRET=secrets.token_urlsafe(48),
        WARDEN_MONITOR_LOCAL_NVML="off",
        WARDEN_GATEWAY_PORT=str(free_port()),
    )
    env.update({f"WARDEN_{key.upper()}": value for key, value in settings.items()})
    return env


@contextlib.contextmanager
def silent_listener() -> Iterator[socket.socket]:
    """A listening TCP socket: connections to its port are accepted (by the kernel) and never
    hear a word."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(16)
        yield server


def port_of(server: socket.socket) -> int:
    return int(server.getsockname()[1])


def start(tmp: Path, env: dict[str, str], *args: str) -> subprocess.Popen[bytes]:
    """`warden ARGS`, its output going to tmp/warden.log."""
    with (tmp / "warden.log").open("wb") as log:
        return subprocess.Popen(
            [*WARDEN, *args], env=env, cwd=tmp, stdin=subprocess.DEVNULL, stdout=log, stderr=log
        )


def output_of(tmp: Path) -> str:
    return (tmp / "warden.log").read_text(errors="replace")


def finish(process: subprocess.Popen[bytes], tmp: Path, deadline_s: float) -> tuple[int, str]:
    try:
        code = process.wait(timeout=deadline_s)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        pytest.fail(f"warden still running after {deadline_s:g}s:\n{output_of(tmp)[-3000:]}")
    return code, output_of(tmp)


def wait_for_a_caller(
    process: subprocess.Popen[bytes], tmp: Path, server: socket.socket, deadline_s: float
) -> None:
    """Wait until a connection to `server` waits to be accepted (it never is): the process is
    inside a connect that will get no answer."""
    deadline = time.monotonic() + deadline_s
    while not select.select([server], [], [], 0.2)[0]:
        if time.monotonic() > deadline or process.poll() is not None:
            pytest.fail(f"no connection within {deadline_s:g}s; output:\n{output_of(tmp)[-3000:]}")


def wait_for_output(
    process: subprocess.Popen[bytes], tmp: Path, words: str, deadline_s: float
) -> None:
    """Wait until `words` appear in the output while the process keeps running."""
    deadline = time.monotonic() + deadline_s
    while words not in output_of(tmp):
        if time.monotonic() > deadline or process.poll() is not None:
            pytest.fail(f"no {words!r} within {deadline_s:g}s; output:\n{output_of(tmp)[-3000:]}")
        time.sleep(0.2)


@pytest.mark.timeout(120)
def test_a_broker_that_never_answers_neither_hangs_start_up_nor_ignores_sigterm(
    tmp_path: Path,
) -> None:
    with silent_listener() as server:
        env = env_for(
            tmp_path,
            bus_amqp_url=f"amqp://guest:guest@127.0.0.1:{port_of(server)}/",
            bus_connect_timeout_s="2",  # each try gives up after 2 s instead of 10 s
        )
        process = start(tmp_path, env, "run", "reservations")
        wait_for_output(process, tmp_path, "did not answer within 2s", deadline_s=60)
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, tmp_path, deadline_s=20)
    assert code == 0, output
    assert "Traceback" not in output


@pytest.mark.timeout(180)
def test_an_unreachable_database_is_retried_then_one_clear_line(tmp_path: Path) -> None:
    dead = f"postgresql+asyncpg://postgres@127.0.0.1:{free_port()}/warden"
    env = env_for(tmp_path, storage_database_url=dead)
    # 3 s of retries instead of the default 30 s: three attempts (after 0.5 s, 1 s), enough to
    # see it retry and say so once.
    process = start(tmp_path, env, "run", "all", "--connect-wait", "3")
    code, output = finish(process, tmp_path, deadline_s=120)
    assert code == 1, output
    assert "Traceback" not in output
    assert "cannot reach" in output or "unreachable" in output
    assert "retrying for up to 3s" in output  # said once while it waited
    assert output.count("retrying for up to") == 1
    last = output.strip().splitlines()[-1]
    assert last.startswith("warden: ") and "storage.database_url" in last
    assert "after 3s of retries" in last


@pytest.mark.timeout(120)
def test_an_unreachable_database_does_not_keep_sigterm_waiting(tmp_path: Path) -> None:
    with silent_listener() as server:  # accepts, never answers: each connect times out
        url = f"postgresql+asyncpg://x@127.0.0.1:{port_of(server)}/w"
        process = start(tmp_path, env_for(tmp_path, storage_database_url=url), "run", "all")
        wait_for_a_caller(process, tmp_path, server, deadline_s=60)  # the database's connect
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, tmp_path, deadline_s=30)
    assert code == 0, output
    assert "Traceback" not in output


@pytest.mark.timeout(120)
def test_a_busy_gateway_port_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen(1)
        port = holder.getsockname()[1]
        env = env_for(tmp_path, gateway_port=str(port))
        subprocess.run(
            [*WARDEN, "db", "upgrade"], env=env, cwd=tmp_path, check=True, capture_output=True
        )
        code, output = finish(start(tmp_path, env, "run", "all"), tmp_path, deadline_s=90)
    assert code != 0, output
    assert "Traceback" not in output
    assert f"cannot listen on 127.0.0.1:{port}" in output
    assert "gateway.port" in output


def one_clear_line(output: str) -> str:
    """The last line of `output`, checked to be `warden: ...` after no traceback."""
    assert "Traceback" not in output, output
    assert " object at 0x" not in output, output
    last = output.strip().splitlines()[-1]
    assert last.startswith("warden: "), output
    return last


@pytest.mark.timeout(120)
def test_db_upgrade_against_a_closed_port_is_one_clear_line(tmp_path: Path) -> None:
    url = f"postgresql+asyncpg://postgres:s3cret@127.0.0.1:{free_port()}/warden"
    env = env_for(tmp_path, storage_database_url=url)
    code, output = finish(start(tmp_path, env, "db", "upgrade"), tmp_path, deadline_s=90)
    assert code == 1, output
    last = one_clear_line(output)
    assert "storage.database_url" in last and "refused" in last
    assert "s3cret" not in output


@pytest.mark.timeout(120)
def test_a_database_that_does_not_exist_is_one_clear_line(
    tmp_path: Path, pg_url: str, amqp_url: str
) -> None:
    missing = pg_url.rsplit("/", 1)[0] + f"/warden_missing_{secrets.token_hex(4)}"
    env = env_for(tmp_path, storage_database_url=missing, bus_amqp_url=amqp_url)
    code, output = finish(start(tmp_path, env, "db", "upgrade"), tmp_path, deadline_s=90)
    assert code == 1, output
    assert "does not exist" in one_clear_line(output)
    process = start(tmp_path, env, "run", "violations")
    code, output = finish(process, tmp_path, deadline_s=90)
    assert code != 0, output
    last = one_clear_line(output)
    assert "storage.database_url" in last and "does not exist" in last


@pytest.mark.timeout(120)
def test_a_missing_rabbitmq_vhost_is_named(tmp_path: Path, amqp_url: str) -> None:
    vhost = f"warden-missing-{secrets.token_hex(4)}"
    url = amqp_url.rsplit("/", 1)[0] + f"/{vhost}"
    env = env_for(tmp_path, bus_amqp_url=url)
    process = start(tmp_path, env, "run", "reservations", "--connect-wait", "0")
    code, output = finish(process, tmp_path, deadline_s=90)
    assert code == 1, output
    last = one_clear_line(output)
    assert vhost in last and "virtual host" in last and "bus.amqp_url" in last


@pytest.mark.timeout(120)
def test_sigterm_during_a_connect_to_a_silent_broker_stops_at_once(tmp_path: Path) -> None:
    with silent_listener() as server:
        env = env_for(
            tmp_path,
            bus_amqp_url=f"amqp://guest:guest@127.0.0.1:{port_of(server)}/",
            bus_connect_timeout_s="300",  # the attempt would outlast the deadline below
        )
        process = start(tmp_path, env, "run", "reservations")
        wait_for_a_caller(process, tmp_path, server, deadline_s=60)
        process.send_signal(signal.SIGTERM)
        code, output = finish(process, tmp_path, deadline_s=30)
    assert code == 0, output
    assert "Traceback" not in output
