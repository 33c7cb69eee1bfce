"""A real SMTP server for the browser tests (aiosmtpd): `python -m tests.support.mail_sink`
prints `{"port": N}` once it listens on 127.0.0.1, then one JSON line per message received
(`to`: its recipients, `subject`), until it is stopped."""

from __future__ import annotations

import json
import signal
import sys
import threading
from email import message_from_bytes
from email.policy import default
from typing import Any

from aiosmtpd.controller import Controller

from tests.support.ports import free_port


class Printing:
    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        message = message_from_bytes(envelope.content, policy=default)
        line = {"to": list(envelope.rcpt_tos), "subject": str(message["Subject"] or "")}
        print(json.dumps(line), flush=True)
        return "250 OK"


def main() -> None:
    controller = Controller(Printing(), hostname="127.0.0.1", port=free_port())
    controller.start()
    stopped = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stopped.set())
    print(json.dumps({"port": controller.port}), flush=True)
    try:
        stopped.wait()
    finally:
        controller.stop()
        sys.stdout.flush()


if __name__ == "__main__":
    main()
