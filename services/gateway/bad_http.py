"""Requests that are not valid HTTP: one warning line now and then, not a traceback each.

aiohttp answers a request line or header over its limits (8,190 bytes), a malformed line or
a broken body with 400 itself, and logs each at ERROR with a traceback: anyone could fill the
log with them. The gateway's server logs through `server_logger()`, whose filter turns these
into one WARNING line at most every `EVERY_S`, counting the rest; its message names the kind
of fault and the peer, never the request's own bytes. Every other error passes unchanged.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from aiohttp.http_exceptions import HttpProcessingError

EVERY_S = 60.0


class BadHttpFilter(logging.Filter):
    def __init__(self, every_s: float = EVERY_S, clock: Callable[[], float] = time.monotonic):
        super().__init__()
        self.every_s = every_s
        self.clock = clock
        self._last = float("-inf")
        self._held_back = 0  # bad requests not logged since the last line

    def filter(self, record: logging.LogRecord) -> bool:
        err = record.exc_info[1] if record.exc_info else None
        if not isinstance(err, HttpProcessingError):
            return True
        now = self.clock()
        if now - self._last < self.every_s:
            self._held_back += 1
            return False
        self._last = now
        more = f"; {self._held_back} more since the last such line" if self._held_back else ""
        self._held_back = 0
        peer = record.args[0] if isinstance(record.args, tuple) and record.args else "?"
        record.msg = "answered %d to a request that is not valid HTTP (%s) from %s%s"
        record.args = (err.code, type(err).__name__, peer, more)
        record.levelno, record.levelname = logging.WARNING, "WARNING"
        record.exc_info, record.exc_text = None, None
        return True


def server_logger() -> logging.Logger:
    """The logger the gateway's HTTP server reports its errors on (filtered, see above)."""
    logger = logging.getLogger("warden.gateway.http")
    if not any(isinstance(found, BadHttpFilter) for found in logger.filters):
        logger.addFilter(BadHttpFilter())
    return logger
