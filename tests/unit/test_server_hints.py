"""The test suite's own promise: a RabbitMQ it cannot reach fails each test with how to start
one, never with a bus traceback (tests/conftest.py's `amqp_url`).

A pytest of its own runs a test that connects Warden's bus through `amqp_url`, with
WARDEN_TEST_AMQP_URL at a port where nothing listens; the real RabbitMQ is left alone.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from pathlib import Path

from tests.conftest import _amqp_problem, _shown
from tests.support.ports import free_port

REPO = Path(__file__).resolve().parents[2]

USES_THE_BUS = """
from services.shared.bus.amqp import AmqpBus

async def test_uses_the_bus(amqp_url: str) -> None:
    bus = AmqpBus(amqp_url)
    await bus.start()  # without the fixture's check: ServiceUnavailable, a traceback
    await bus.close()
"""


def test_an_unreachable_rabbitmq_fails_with_how_to_start_it(tmp_path: Path) -> None:
    (tmp_path / "test_probe.py").write_text(USES_THE_BUS)
    port = free_port()
    env = {**os.environ, "WARDEN_TEST_AMQP_URL": f"amqp://guest:secret@127.0.0.1:{port}/"}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "tests.conftest", "--rootdir", str(REPO),
         "-c", str(REPO / "pyproject.toml"), "-p", "no:cacheprovider", str(tmp_path)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=100,
    )  # fmt: skip
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert f"cannot reach RabbitMQ at amqp://guest:***@127.0.0.1:{port}/" in out
    assert "rabbitmq-server -detached" in out
    assert "Traceback" not in out and "ServiceUnavailable" not in out
    assert "secret" not in out


def test_a_port_that_answers_but_not_amqp_is_not_a_broker() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]

        def answer_as_http() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(8)
                conn.sendall(b"HTTP/1.0 400 Bad Request\r\n\r\n")

        thread = threading.Thread(target=answer_as_http)
        thread.start()
        problem = _amqp_problem(f"amqp://127.0.0.1:{port}/")
        thread.join()
    assert problem == f"127.0.0.1:{port} answers, but not as an AMQP 0-9-1 broker"


def test_the_password_is_not_shown() -> None:
    assert _shown("amqp://u:p4ss@rabbit:5672/v") == "amqp://u:***@rabbit:5672/v"
    assert _shown("amqp://rabbit/") == "amqp://rabbit/"
