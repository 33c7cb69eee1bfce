"""`warden hosts check`: can Warden log in to every host, and does each have nvidia-smi and GPUs?"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence
from dataclasses import dataclass

from services.monitor.nvml import load_nvml
from services.shared.config import HostConfig
from services.shared.remote.ssh import HostShell, HostUnreachable, SshHostShell, SshOptions

_GPU_LINE = re.compile(r"^GPU (\d+): (.*) \(UUID: ([^)]*)\)")


@dataclass(frozen=True)
class CheckResult:
    name: str
    address: str
    ok: bool
    gpus: int | None
    detail: str
    # The GPUs `nvidia-smi -L` listed: {index, name, uuid} each.
    found: tuple[dict[str, object], ...] = ()
    # Whether the login may write the violation warning on others' terminals (group tty),
    # and why; None: not asked (no login, or this machine through NVML).
    terminals: dict[str, object] | None = None


def terminal_writes(user: str, groups: Sequence[str]) -> dict[str, object]:
    """Whether `user` (in `groups`) can write on another user's terminal, as the terminal
    step does by default: root, or a member of group tty. Pure."""
    if user == "root" or "tty" in groups:
        why = "root" if user == "root" else "in group tty"
        return {"ok": True, "detail": f"{user} is {why}: it writes warnings on terminals"}
    return {
        "ok": False,
        "detail": f"{user} is not in group tty: the terminal warning cannot be written "
        f"(on the host: sudo usermod -aG tty {user})",
    }


async def check_shell(host: HostConfig, shell: HostShell, timeout: float) -> CheckResult:
    where = f"{host.address}:{host.port}"
    try:
        login = await shell.run("echo ok", timeout)
        if login.stdout.strip() != "ok":
            return CheckResult(host.name, where, False, None, "login works but the shell is odd")
        located = await shell.run("command -v nvidia-smi", timeout)
        if located.exit_status != 0:
            return CheckResult(host.name, where, False, None, "no nvidia-smi on the host's PATH")
        listing = await shell.run("nvidia-smi -L", timeout)
        terminals = await _terminals(shell, timeout)
    except HostUnreachable as err:
        return CheckResult(host.name, where, False, None, str(err.details.get("reason")))
    finally:
        await shell.close()
    if listing.exit_status != 0:
        text = (listing.stdout + listing.stderr).strip().splitlines()
        return CheckResult(
            host.name, where, False, None, f"nvidia-smi failed: {text[0] if text else '?'}"
        )
    found = tuple(
        {"index": int(match[1]), "name": match[2], "uuid": match[3]}
        for match in map(_GPU_LINE.match, listing.stdout.splitlines())
        if match
    )
    detail = "ok" if found else "ok, but no GPU"
    return CheckResult(host.name, where, True, len(found), detail, found, terminals)


# The login's name, then its groups: one round trip.
WHO_AND_GROUPS = "id -un; id -nG"


async def _terminals(shell: HostShell, timeout: float) -> dict[str, object] | None:
    answer = await shell.run(WHO_AND_GROUPS, timeout)
    lines = answer.stdout.splitlines()
    if answer.exit_status != 0 or len(lines) < 2:
        return None
    return terminal_writes(lines[0].strip(), lines[1].split())


def check_local(name: str) -> CheckResult:
    nvml = load_nvml()
    if nvml is None:
        return CheckResult(name, "local (NVML)", False, None, "no NVML library or driver")
    found = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        found.append(
            {
                "index": index,
                "name": _text(nvml.nvmlDeviceGetName(handle)),
                "uuid": _text(nvml.nvmlDeviceGetUUID(handle)),
            }
        )
    return CheckResult(name, "local (NVML)", True, len(found), "ok", tuple(found))


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


async def check_hosts(
    hosts: Sequence[HostConfig], options: SshOptions, timeout: float
) -> list[CheckResult]:
    async def one(host: HostConfig) -> CheckResult:
        if host.probe == "nvml":
            return await asyncio.to_thread(check_local, host.name)
        return await check_shell(host, SshHostShell(host, options), timeout)

    return list(await asyncio.gather(*(one(host) for host in hosts)))


def format_table(results: Sequence[CheckResult]) -> str:
    rows = [("HOST", "ADDRESS", "STATUS", "GPUS", "DETAIL")]
    for result in results:
        gpus = "-" if result.gpus is None else str(result.gpus)
        rows.append(
            (result.name, result.address, "ok" if result.ok else "FAILED", gpus, result.detail)
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:4], widths, strict=True))
        + "  "
        + row[4]
        for row in rows
    )
