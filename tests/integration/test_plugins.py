"""The example plugins (examples/plugins) receive Warden's events as published by our bus.

Each plugin runs as a real subprocess against the test's own vhost: the nameko service through
`nameko run`, the pika consumer through `python consumer.py`. Once each one's queue has a
consumer, ONE violation.opened goes out through AmqpBus, and both must have written it.
"""

from __future__ import annotations

import asyncio
import csv
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pika
import pika.exceptions
import pytest

from services.shared.bus.amqp import AmqpBus
from tests.support.polling import until_sync

pytestmark = pytest.mark.amqp

ROOT = Path(__file__).resolve().parents[2]
NAMEKO_DIR = ROOT / "examples" / "plugins" / "nameko_chat"
PIKA_CONSUMER = ROOT / "examples" / "plugins" / "pika_csv" / "consumer.py"
NAMEKO_QUEUE = "evt-violations-violation.opened--warden_chat_plugin.on_opened"
PIKA_QUEUE = "evt-violations-violation.any--csv_plugin.append"
DEADLINE_S = 30.0

T = TypeVar("T")


@dataclass
class Plugin:
    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""


def _start(name: str, argv: list[str], cwd: Path, env: dict[str, str], tmp: Path) -> Plugin:
    log_path = tmp / f"{name}.log"
    with log_path.open("wb") as log_file:
        process = subprocess.Popen(
            argv,
            cwd=cwd,
            env={**os.environ, "PYTHONWARNINGS": "ignore", **env},
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    return Plugin(name, process, log_path)


def _stop(plugin: Plugin) -> None:
    if plugin.process.poll() is None:
        plugin.process.terminate()
        try:
            plugin.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            plugin.process.kill()
            plugin.process.wait(timeout=10)


def _wait_for(what: str, probe: Callable[[], T | None], plugin: Plugin) -> T:
    """Poll `probe` until it returns something; fail with the plugin's log at the deadline."""

    def found() -> T | None:
        if (answer := probe()) is None and plugin.process.poll() not in (None, 0):
            pytest.fail(
                f"{plugin.name} exited with {plugin.process.returncode} while waiting for "
                f"{what}; its output:\n{plugin.log()}"
            )
        return answer

    return until_sync(
        found,
        what,
        DEADLINE_S,
        interval=0.1,
        report=lambda: f"{plugin.name} output:\n{plugin.log()}",
    )


def _wait_for_consumer(amqp_url: str, queue: str, plugin: Plugin) -> None:
    connection = pika.BlockingConnection(pika.URLParameters(amqp_url))
    try:

        def consumers() -> int | None:
            # A passive declare of a queue that does not exist yet closes the channel (404),
            # so each try opens a channel of its own.
            channel = connection.channel()
            try:
                ok = channel.queue_declare(queue, passive=True)
            except pika.exceptions.ChannelClosedByBroker:
                return None
            channel.close()
            return ok.method.consumer_count or None

        _wait_for(f"a consumer on {queue}", consumers, plugin)
    finally:
        connection.close()


@pytest.fixture
def nameko_plugin(amqp_url: str, tmp_path: Path) -> Iterator[tuple[Plugin, Path]]:
    out = tmp_path / "chat.jsonl"
    plugin = _start(
        "nameko_chat",
        [str(Path(sys.executable).with_name("nameko")), "run", "--config", "config.yaml", "plugin"],
        NAMEKO_DIR,
        {"AMQP_URI": amqp_url, "WARDEN_PLUGIN_OUT": str(out)},
        tmp_path,
    )
    try:
        yield plugin, out
    finally:
        _stop(plugin)


@pytest.fixture
def pika_plugin(amqp_url: str, tmp_path: Path) -> Iterator[tuple[Plugin, Path]]:
    out = tmp_path / "violations.csv"
    plugin = _start(
        "pika_csv",
        [sys.executable, str(PIKA_CONSUMER), "--out", str(out), "--once", "1"],
        PIKA_CONSUMER.parent,
        {"WARDEN_AMQP_URL": amqp_url},
        tmp_path,
    )
    try:
        yield plugin, out
    finally:
        _stop(plugin)


def _violation() -> dict[str, Any]:
    return {
        "incident_id": f"inc-{uuid.uuid4().hex[:8]}",
        "host": "node-7",
        "gpu_uuid": "GPU-0c5e1b7a-0000-0000-0000-000000000003",
        "gpu_index": 3,
        "offender": "mallory",
        "pids": [4242, 4243],
        "commands": ["python train.py"],
        "reservation_id": 1,
        "owner": "alice",
        "reservation_start": "2025-05-01T08:00:00+00:00",
        "reservation_end": "2025-05-01T18:00:00+00:00",
        "since": "2025-05-01T09:30:00+00:00",
    }


async def _emit(amqp_url: str, data: dict[str, Any]) -> str:
    bus = AmqpBus(amqp_url, name="test-plugins")
    await bus.start()
    try:
        envelope = await bus.emit("violation.opened", data, source="violations")
    finally:
        await bus.close()
    return envelope.id


def _json_line_with(path: Path, event_id: str) -> dict[str, Any] | None:
    if not path.exists():
        return None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if record.get("event_id") == event_id:
                return record
    return None


def _csv_row_with(path: Path, incident_id: str) -> dict[str, str] | None:
    if not path.exists():
        return None
    with path.open(newline="", encoding="utf-8") as rows:
        return next((r for r in csv.DictReader(rows) if r["incident_id"] == incident_id), None)


def test_example_plugins_receive_a_violation_published_by_warden(
    amqp_url: str,
    nameko_plugin: tuple[Plugin, Path],
    pika_plugin: tuple[Plugin, Path],
) -> None:
    (chat, chat_out), (csv_plugin, csv_out) = nameko_plugin, pika_plugin
    _wait_for_consumer(amqp_url, NAMEKO_QUEUE, chat)
    _wait_for_consumer(amqp_url, PIKA_QUEUE, csv_plugin)

    data = _violation()
    event_id = asyncio.run(_emit(amqp_url, data))

    posted = _wait_for("the chat plugin's line", lambda: _json_line_with(chat_out, event_id), chat)
    assert posted["offender"] == "mallory"
    assert posted["incident_id"] == data["incident_id"]
    assert "GPU 3 on node-7" in posted["text"] and "alice" in posted["text"]

    row = _wait_for(
        "the CSV plugin's row", lambda: _csv_row_with(csv_out, data["incident_id"]), csv_plugin
    )
    assert row["type"] == "violation.opened"
    assert row["event_id"] == event_id
    assert (row["host"], row["gpu_index"], row["offender"], row["owner"]) == (
        "node-7",
        "3",
        "mallory",
        "alice",
    )
    assert row["pids"] == "4242 4243"
    # --once 1: it stops by itself, cleanly, after the one message.
    assert csv_plugin.process.wait(timeout=DEADLINE_S) == 0, csv_plugin.log()
