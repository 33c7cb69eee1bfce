"""The server that this machine's Warden config names (`warden init` wrote it), for a client
command given no server otherwise: on the head node `warden login` needs no `--server`.

The file is the one `warden run` reads ($WARDEN_CONFIG, else
`$XDG_CONFIG_HOME/warden/warden.toml`, else `~/.config/warden/warden.toml`), read as plain TOML:
the client-only install has none of the server's code. Its `[gateway]` `public_url`, else
`http://host:port` ($WARDEN_GATEWAY_HOST and $WARDEN_GATEWAY_PORT win, as for the server).
"""

from __future__ import annotations

import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

# A gateway listening on every address is reached on this machine through loopback.
_EVERY_ADDRESS = {"", "0.0.0.0", "::", "[::]"}


def config_path(environ: Mapping[str, str]) -> Path:
    if environ.get("WARDEN_CONFIG"):
        return Path(environ["WARDEN_CONFIG"]).expanduser()
    home = Path(environ["HOME"]) if environ.get("HOME") else Path.home()
    base = environ.get("XDG_CONFIG_HOME") or str(home / ".config")
    return Path(base) / "warden" / "warden.toml"


def configured_server(environ: Mapping[str, str]) -> str | None:
    """The gateway's address in the local config; None without a readable one."""
    try:
        data = tomllib.loads(config_path(environ).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return None
    gateway: Any = data.get("gateway", {})
    if not isinstance(gateway, dict):
        return None
    public_url = gateway.get("public_url")
    if isinstance(public_url, str) and public_url.strip():
        return public_url.strip()
    host = str(environ.get("WARDEN_GATEWAY_HOST") or gateway.get("host") or "127.0.0.1")
    port = str(environ.get("WARDEN_GATEWAY_PORT") or gateway.get("port") or 8080)
    if host in _EVERY_ADDRESS:
        host = "127.0.0.1"
    elif ":" in host and not host.startswith("["):
        host = f"[{host}]"  # an IPv6 address
    return f"http://{host}:{port}"
