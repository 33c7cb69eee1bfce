"""Structured logs: one line per noteworthy event, as text (key=value) or JSON.

Add context with `log.info("host down", extra={"fields": {"host": name}})`.
"""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any

from services.shared.config import LogSettings


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    found = getattr(record, "fields", None)
    return dict(found) if isinstance(found, dict) else {}


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        when = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        line = f"{when} {record.levelname:<7} {record.name}: {record.getMessage()}"
        extra = " ".join(
            f"{k}={v!r}" if isinstance(v, str) and " " in v else f"{k}={v}"
            for k, v in _fields(record).items()
        )
        if extra:
            line += " " + extra
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure_logging(settings: LogSettings) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if settings.format == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(settings.level.upper())
    # Libraries log every connection detail at INFO; keep their noise to warnings.
    for noisy in ("asyncssh", "aiohttp.access", "alembic"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
    # A lost broker connection makes aio-pika and aiormq log an error per channel, with a
    # traceback; the bus says it once ("lost the connection ...", "reconnected ..."). Their
    # words still show at debug level.
    for noisy in ("aiormq", "aio_pika"):
        logging.getLogger(noisy).setLevel(
            root.level if root.level <= logging.DEBUG else logging.CRITICAL
        )
