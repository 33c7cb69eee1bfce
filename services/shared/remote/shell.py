"""What a command run on a host is, with no SSH in it: `CommandResult`, the `HostShell`
interface commands run through, and `HostUnreachable` (a command could not be run).

Pure: the remote-script protocols (`jobs/scripts.py`, `violations/scripts.py`) parse
`CommandResult`s without importing the SSH layer; `ssh.py` beside it implements `HostShell` over
asyncssh and re-exports these names.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass

from services.shared.errors import WardenError, register_error

# How the reason of a host that presents another key than the one trusted for it begins (what
# the monitor publishes in `host.unreachable`; the admins' notification looks for it).
HOST_KEY_CHANGED = "host key changed"


@register_error
class HostUnreachable(WardenError):
    """A command could not be run on a host; `message` says why in words, `details` in data."""

    code = "host_unreachable"


@dataclass(frozen=True)
class CommandResult:
    exit_status: int | None
    stdout: str
    stderr: str = ""


class HostShell(ABC):
    """Runs commands on one host."""

    name: str

    @abstractmethod
    async def run(self, command: str, timeout: float) -> CommandResult:
        """Run `command` (sh syntax) within `timeout` seconds; raise HostUnreachable."""

    @abstractmethod
    async def close(self) -> None:
        """Drop the connection (a later `run` connects again)."""

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (none to open: False)."""
        return False

    async def connect(self, timeout: float) -> None:  # noqa: B027 (most shells open nothing)
        """Open the connection before the first command; HostUnreachable when it cannot be."""
