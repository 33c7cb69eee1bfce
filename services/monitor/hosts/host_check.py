"""CHECK_HOST: what a host presents before an admin trusts it.

The server's key is fetched first, without logging in, and compared with the keys trusted for
the host (its accepted `host_key`, else [ssh] known_hosts): "trusted", "new" (none trusted
yet) or "changed" (another key is trusted: possibly someone in between, so no login). For a
trusted or new key Warden then logs in trusting exactly the key it just saw, and lists the
GPUs (`nvidia-smi -L`), so the admin sees what they accept before accepting it.
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

import asyncssh

from services.monitor.check import CheckResult, check_local, check_shell
from services.shared.config import HostConfig
from services.shared.remote.ssh import (
    SshHostShell,
    SshOptions,
    describe_ssh_error,
    key_line,
    trusted_host_keys,
)

TRUSTED = "trusted"
NEW = "new"
CHANGED = "changed"


def key_status(key: asyncssh.SSHKey, trusted: list[asyncssh.SSHKey]) -> str:
    """trusted / new / changed, as `HostKeySchema.status` says. Pure."""
    line = key_line(key)
    if any(key_line(known) == line for known in trusted):
        return TRUSTED
    return CHANGED if trusted else NEW


def host_key_of(key: asyncssh.SSHKey, status: str) -> dict[str, str]:
    return {"line": key_line(key), "fingerprint": key.get_fingerprint("sha256"), "status": status}


def _answer(result: CheckResult, host_key: dict[str, str] | None) -> dict[str, Any]:
    return {
        "ok": result.ok,
        "detail": result.detail,
        "host_key": host_key,
        "gpus": list(result.found),
        "terminals": result.terminals,
    }


def _failed(detail: str, host_key: dict[str, str] | None = None) -> dict[str, Any]:
    return {"ok": False, "detail": detail, "host_key": host_key, "gpus": [], "terminals": None}


async def server_key(
    host: HostConfig, trusted: list[asyncssh.SSHKey], options: SshOptions
) -> asyncssh.SSHKey | None:
    """The key the server presents (no login). Asked first for the algorithms of the trusted
    keys, as a login would: a server with several keys then shows the one that is trusted."""
    algorithms = [alg.decode() for key in trusted for alg in key.sig_algorithms]
    if algorithms:
        try:
            return await asyncssh.get_server_host_key(
                host.address, host.port, server_host_key_algs=algorithms
            )
        except asyncssh.KeyExchangeFailed:
            pass  # it has none of those kinds of key any more: whatever it has is "changed"
    return await asyncssh.get_server_host_key(host.address, host.port)


async def check_host(host: HostConfig, options: SshOptions, timeout: float) -> dict[str, Any]:
    """The HostCheckSchema answer for `host` (of the inventory or a candidate)."""
    if host.probe == "nvml":
        return _answer(await asyncio.to_thread(check_local, host.name), None)
    try:
        trusted = trusted_host_keys(host, options)
    except (asyncssh.KeyImportError, ValueError) as err:
        return _failed(f"host_key is not a public key line: {err}")
    try:
        async with asyncio.timeout(min(timeout, options.connect_timeout_s)):
            key = await server_key(host, trusted, options)
    except (OSError, asyncssh.Error, TimeoutError) as err:
        return _failed(describe_ssh_error(err, host.name))
    if key is None:
        return _failed("the host presented no host key")
    status = key_status(key, trusted)
    found = host_key_of(key, status)
    if status == CHANGED:
        return _failed(
            f"the host presents a key ({found['fingerprint']}) other than the one trusted for "
            "it: not logging in (someone may be in between). If the host was reinstalled, "
            "accept its new key after verifying it on the host (`ssh-keygen -lf` of its "
            "/etc/ssh/ssh_host_*_key.pub)",
            found,
        )
    # Log in trusting exactly the key just seen: a key swapped in between is refused.
    pinned = dataclasses.replace(host, host_key=found["line"])
    result = await check_shell(pinned, SshHostShell(pinned, options), timeout)
    return _answer(result, found)
