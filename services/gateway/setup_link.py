"""The first run's set-up link: printed once by the gateway when no administrator exists.

Like Jupyter's token link: the reservations service issues a one-time token (only its hash is
stored, `reservations/setup.py`), the gateway prints a banner with
`http://127.0.0.1:PORT/setup?token=...` on its stderr (the terminal of `make run`, the
`podman-compose logs` of a container), and the web UI's /setup page creates the first admin
with it. The token appears in that banner alone: never in a log record, never in an answer.
`warden setup-link` prints a new one later. The link names loopback when the gateway listens on
every address: it is meant for a browser on the head node itself (or through an SSH tunnel).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import sys
from typing import TextIO
from urllib.parse import quote

from services.accounts import api
from services.shared.bus import Bus
from services.shared.errors import WardenError

log = logging.getLogger("warden.gateway")

# How a test or a script finds the link in the banner: the one line that starts with this.
LINK_PREFIX = "    set-up link: "
RULE = "=" * 78


def link_host(host: str) -> str:
    """The host a local browser reaches the gateway at: loopback for a wildcard address."""
    if host in ("", "0.0.0.0", "::", "*"):
        return "127.0.0.1"
    try:
        if ipaddress.ip_address(host).version == 6:
            return f"[{host}]"
    except ValueError:
        pass  # a name
    return host


def setup_url(host: str, port: int, token: str) -> str:
    return f"http://{link_host(host)}:{port}/setup?token={quote(token, safe='')}"


def banner(url: str) -> str:
    """What the gateway prints (the link on its own line, after LINK_PREFIX)."""
    return "\n".join(
        (
            RULE,
            "Warden: no administrator exists yet. Open this one-time link in a browser to",
            "create the first administrator (it works once; keep it to yourself):",
            "",
            f"{LINK_PREFIX}{url}",
            "",
            "A new link at any time: `warden setup-link` (in a checkout: bin/warden).",
            "Or on the command line: `warden user add NAME --email E --admin`.",
            RULE,
            "",
        )
    )


async def announce(
    bus: Bus, host: str, port: int, out: TextIO | None = None, retry_max_s: float = 10.0
) -> bool:
    """Print the banner if no admin exists; True when it printed one. Asks the reservations
    service again, backing off, until it answers (it may start after the gateway)."""
    delay, warned = 0.5, False
    while True:
        try:
            answer = await api.ISSUE_SETUP_TOKEN.call(bus)
        except WardenError as err:
            if not warned:
                log.info("set-up check waits for the reservations service (%s)", err.message)
                warned = True
            await asyncio.sleep(delay)
            delay = min(delay * 2, retry_max_s)
            continue
        token = answer.get("token")
        if not token:
            return False
        stream = out or sys.stderr
        stream.write(banner(setup_url(host, port, token)))
        stream.flush()
        log.info("no administrator yet: the set-up link is printed above")
        return True
