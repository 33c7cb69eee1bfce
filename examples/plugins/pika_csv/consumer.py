"""A Warden plugin in plain pika: append every violation.* event to a CSV file.

It owns a durable queue, `evt-violations-violation.any--csv_plugin.append`, bound with
`violation.*` to Warden's durable topic exchange `violations.events`, so events published
while it is stopped wait in the queue. Each message is acked after its row is written (and
flushed); a body that is not a Warden envelope is rejected without requeue.

    python consumer.py [--url AMQP_URL] [--out violations.csv] [--once N]

AMQP_URL defaults to $WARDEN_AMQP_URL or amqp://guest:guest@127.0.0.1:5672/; the CSV path to
$WARDEN_CSV_OUT or ./violations.csv. `--once N` stops after N messages were handled; otherwise
it runs until SIGTERM or SIGINT (Ctrl-C) and then exits 0, leaving unacked messages queued.
"""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

import pika

log = logging.getLogger("csv_plugin")

EXCHANGE = "violations.events"
BINDING = "violation.*"
QUEUE = "evt-violations-violation.any--csv_plugin.append"
SUPPORTED_VERSION = 1
COLUMNS = (
    "occurred_at",
    "type",
    "incident_id",
    "host",
    "gpu_index",
    "offender",
    "owner",
    "pids",
    "event_id",
)
ENVELOPE_KEYS = ("id", "type", "version", "occurred_at", "source", "data")


class NotAnEnvelope(ValueError):
    pass


def parse(body: bytes) -> dict[str, Any]:
    """The envelope in `body`, or NotAnEnvelope saying why it is not one."""
    try:
        envelope = json.loads(body)
    except (ValueError, UnicodeDecodeError) as err:
        raise NotAnEnvelope(f"body is not JSON: {err}") from err
    if not isinstance(envelope, dict):
        raise NotAnEnvelope("body is not a JSON object")
    missing = [key for key in ENVELOPE_KEYS if key not in envelope]
    if missing:
        raise NotAnEnvelope(f"envelope lacks {', '.join(missing)}")
    if not isinstance(envelope["data"], dict):
        raise NotAnEnvelope("envelope data is not an object")
    return envelope


def row(envelope: dict[str, Any]) -> dict[str, Any]:
    data = envelope["data"]
    return {
        "occurred_at": envelope["occurred_at"],
        "type": envelope["type"],
        "incident_id": data.get("incident_id", ""),
        "host": data.get("host", ""),
        "gpu_index": "" if data.get("gpu_index") is None else data["gpu_index"],
        "offender": data.get("offender", ""),
        "owner": data.get("owner") or "",
        "pids": " ".join(str(pid) for pid in data.get("pids") or []),
        "event_id": envelope["id"],
    }


class CsvSink:
    """Appends rows; skips an event id it already wrote (delivery is at least once)."""

    def __init__(self, path: Path):
        self.path = path
        self.seen: set[str] = set()
        if path.exists() and path.stat().st_size > 0:
            with path.open(newline="", encoding="utf-8") as existing:
                self.seen = {r.get("event_id") or "" for r in csv.DictReader(existing)}
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            with path.open("w", newline="", encoding="utf-8") as new:
                csv.DictWriter(new, COLUMNS).writeheader()

    def append(self, envelope: dict[str, Any]) -> bool:
        if envelope["id"] in self.seen:
            return False
        with self.path.open("a", newline="", encoding="utf-8") as out:
            csv.DictWriter(out, COLUMNS).writerow(row(envelope))
            out.flush()
            os.fsync(out.fileno())
        self.seen.add(envelope["id"])
        return True


def run(url: str, out: Path, once: int | None) -> int:  # noqa: C901 - a self-contained example: connect, consume, stop on a signal
    stopping = False

    def stop(signum: int, _frame: Any) -> None:
        nonlocal stopping
        log.info("got %s, stopping", signal.Signals(signum).name)
        stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)

    sink = CsvSink(out)
    connection = pika.BlockingConnection(pika.URLParameters(url))
    channel = connection.channel()
    # The same declaration as Warden's and nameko's: durable topic exchange, not auto-deleted.
    channel.exchange_declare(EXCHANGE, exchange_type="topic", durable=True)
    channel.queue_declare(QUEUE, durable=True)
    channel.queue_bind(QUEUE, EXCHANGE, routing_key=BINDING)
    channel.basic_qos(prefetch_count=1 if once else 16)
    log.info("consuming %s (bound %s %s), writing %s", QUEUE, EXCHANGE, BINDING, out)

    handled = 0
    try:
        for method, _properties, body in channel.consume(QUEUE, inactivity_timeout=0.2):
            if stopping:
                break
            if method is None:  # nothing arrived for a while: look at `stopping` again
                continue
            try:
                envelope = parse(body)
            except NotAnEnvelope as err:
                log.warning("rejected a message on %s: %s", QUEUE, err)
                channel.basic_nack(method.delivery_tag, requeue=False)
            else:
                if envelope["version"] != SUPPORTED_VERSION:
                    log.warning(
                        "skipped %s %s: version %r",
                        envelope["type"],
                        envelope["id"],
                        envelope["version"],
                    )
                elif sink.append(envelope):
                    log.info("appended %s %s", envelope["type"], envelope["id"])
                channel.basic_ack(method.delivery_tag)
            handled += 1
            if once is not None and handled >= once:
                break
        channel.cancel()  # messages prefetched but not handled go back to the queue
    finally:
        if connection.is_open:
            connection.close()
    log.info("stopped after %d message(s)", handled)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--url",
        default=os.environ.get("WARDEN_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/"),
        help="RabbitMQ URL (default: $WARDEN_AMQP_URL or the local guest account)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path(os.environ.get("WARDEN_CSV_OUT", "violations.csv")),
        help="CSV file to append to (default: $WARDEN_CSV_OUT or ./violations.csv)",
    )
    parser.add_argument("--once", type=int, metavar="N", help="stop after N messages")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    logging.getLogger("pika").setLevel(logging.WARNING)
    return run(args.url, args.out, args.once)


if __name__ == "__main__":
    sys.exit(main())
