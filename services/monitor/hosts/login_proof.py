"""PROVE_LOGIN: whether a person controls a Unix account on a host, for SSH self-signup.

The person puts Warden's public key (`[ssh] key_file`) into that account's authorized_keys;
Warden then logs in as them with that key (the host key verified as for every login: the
host's accepted key, else [ssh] known_hosts and its policy) and runs `id -un`. When sshd
refuses, the host's management login asks `id -u -- USER` (the name quoted; it was also
checked against the username rule by the api schema) to tell a missing key from a missing
user, since sshd answers both alike.

The management account itself is never proven: with no separate `[ssh] key_file` its key is
Warden's user key, and signing up as it would prove nothing the person did.
"""

from __future__ import annotations

import asyncio
import dataclasses
import shlex
from collections.abc import Sequence
from typing import Any

import asyncssh

from services.shared.config import HostConfig
from services.shared.remote.ssh import HostUnreachable, SshHostShell, SshOptions

PROVEN = "proven"
KEY_NOT_INSTALLED = "key_not_installed"
UNKNOWN_USER = "unknown_user"
REFUSED = "refused"
UNREACHABLE = "unreachable"
# Which failure to report when several hosts were tried: the one the person can act on.
_RANK = (KEY_NOT_INSTALLED, REFUSED, UNKNOWN_USER, UNREACHABLE)
MAX_PARALLEL = 8


def _outcome(host: str, outcome: str, reason: str) -> dict[str, Any]:
    return {"host": host, "outcome": outcome, "reason": reason}


async def _run(host: HostConfig, options: SshOptions, command: str, timeout: float) -> Any:
    shell = SshHostShell(host, options)
    try:
        return await shell.run(command, timeout)
    finally:
        await shell.close()


async def _user_exists(
    host: HostConfig, options: SshOptions, username: str, timeout: float
) -> tuple[bool | None, str]:
    """Whether `host` has the Unix user, asked through its management login (None: could not
    ask, with the reason)."""
    try:
        done = await _run(host, options, f"id -u -- {shlex.quote(username)}", timeout)
    except HostUnreachable as err:
        return None, _reason(err)
    return done.exit_status == 0, ""


def _reason(err: HostUnreachable) -> str:
    return str(err.details.get("reason", err.message)) if isinstance(err.details, dict) else ""


async def prove_on(
    host: HostConfig, username: str, options: SshOptions, timeout: float
) -> dict[str, Any]:
    """The outcome of logging in to `host` as `username` with Warden's user key."""
    if username == host.user:
        return _outcome(
            host.name,
            REFUSED,
            f"{username} is the account Warden manages {host.name} with: it cannot sign up",
        )
    login = dataclasses.replace(host, user=username, key_file=options.key_file or host.key_file)
    try:
        done = await _run(login, options, "id -un", timeout)
    except HostUnreachable as err:
        if not isinstance(err.__cause__, asyncssh.PermissionDenied):
            return _outcome(
                host.name, UNREACHABLE, f"{host.name} cannot be reached: {_reason(err)}"
            )
        exists, why_not = await _user_exists(host, options, username, timeout)
        if exists is False:
            return _outcome(host.name, UNKNOWN_USER, f"{host.name} has no Unix user {username}")
        return _outcome(
            host.name,
            KEY_NOT_INSTALLED,
            f"{host.name} refused Warden's key for {username}: add the key line to "
            f"~{username}/.ssh/authorized_keys there"
            + (
                ""
                if exists
                else f" (or {username} is not a user of {host.name}: asking failed, {why_not})"
            ),
        )
    if done.exit_status != 0 or done.stdout.strip() != username:
        return _outcome(
            host.name, REFUSED, f"logged in to {host.name}, but not as {username} (`id -un`)"
        )
    return _outcome(host.name, PROVEN, f"logged in to {host.name} as {username}")


async def prove_login(
    hosts: Sequence[HostConfig], username: str, options: SshOptions, timeout: float
) -> dict[str, Any]:
    """The ProveLoginSchema answer: proven on any of `hosts` (tried side by side), else the
    most useful failure, with every host's outcome."""
    if not hosts:
        return {
            "proven": False,
            "host": None,
            "outcome": UNREACHABLE,
            "reason": "no host Warden logs in to over SSH is in the inventory",
            "tried": [],
        }
    limit = asyncio.Semaphore(MAX_PARALLEL)

    async def one(host: HostConfig) -> dict[str, Any]:
        async with limit:
            return await prove_on(host, username, options, timeout)

    tried = await asyncio.gather(*(one(host) for host in hosts))
    best = next((t for t in tried if t["outcome"] == PROVEN), None)
    if best is None:
        best = min(tried, key=lambda t: _RANK.index(t["outcome"]))
    return {"proven": best["outcome"] == PROVEN, **best, "tried": list(tried)}
