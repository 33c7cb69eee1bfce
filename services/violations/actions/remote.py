"""How the terminal, terminate and kill handlers run their scripts on a host, and as whom.

The scripts and their answers are `services.violations.scripts` (the protocol). `HostShell`
runs one command as one login on one host: `SshHostShell` connects per call (these actions
are rare) through the shared `[ssh]` options and known_hosts handling; `FakeHostShell`
answers scripted results and records every call, for unit tests.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, TypeVar

from services.shared.config import HostConfig, SshSettings, ViolationSettings
from services.shared.errors import register_error
from services.shared.remote import ssh
from services.shared.remote.ssh import CommandResult, SshOptions

T = TypeVar("T")


@register_error
class RemoteCommandFailed(ssh.HostUnreachable):
    """A violation action's command could not be run on a host, or its answer made no sense.

    `message` says why in words (for the incident's timeline), `details` holds host, login and
    reason. Subclasses HostUnreachable, so code that retries unreachable hosts retries these.
    """

    code = "remote_command_failed"


def _first_line(text: str) -> str:
    return next((line.strip() for line in text.splitlines() if line.strip()), "")


def failure(result: CommandResult, host: str, login: str, what: str) -> RemoteCommandFailed:
    """The error for a command that did not answer as it should (with what it said)."""
    said = _first_line(result.stderr) or _first_line(result.stdout) or "no output"
    reason = f"{what} gave no answer (exit status {result.exit_status}: {said})"
    return RemoteCommandFailed(
        f"{host}: {reason}", {"host": host, "login": login, "reason": reason}
    )


def require(parsed: T | None, result: CommandResult, host: str, login: str, what: str) -> T:
    """`parsed`, or RemoteCommandFailed saying what the host answered instead."""
    if parsed is None:
        raise failure(result, host, login, what)
    return parsed


# --- who logs in ----------------------------------------------------------------------------


def login_for(host: HostConfig, settings: ViolationSettings, offender: str) -> tuple[str, bool]:
    """(login user, sudo?) for acting on `offender`'s sessions and processes."""
    if settings.act_as == "offender":
        return offender, False
    if settings.act_as == "management":
        return host.user, True
    raise ValueError(f"act_as must be offender or management, not {settings.act_as!r}")


def terminal_login(
    host: HostConfig, settings: ViolationSettings, offender: str
) -> tuple[str, bool]:
    """(login user, sudo?) for writing to `offender`'s terminals: the host's management user
    without sudo (it writes as a member of group tty), unless `terminal_as` says act_as."""
    if settings.terminal_as == "management":
        return host.user, False
    return login_for(host, settings, offender)


# --- shells ---------------------------------------------------------------------------------


class HostShell(Protocol):
    async def run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        """Run `command` on `host` logged in as `login`; raise RemoteCommandFailed."""
        ...


class SshHostShell:
    """One SSH connection per command, with the `[ssh]` known_hosts and connect timeout.

    The key is `host.key_file` for the host's management user and `ssh.key_file` (empty:
    `host.key_file` too) for any other login. `command_timeout_s` bounds the command once
    connected; connecting has `ssh.connect_timeout_s`.
    """

    def __init__(self, settings: SshSettings, *, command_timeout_s: float = 30.0) -> None:
        self.options = SshOptions.from_settings(settings)
        self.command_timeout_s = command_timeout_s

    async def run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        shell = ssh.SshHostShell(self.options.as_login(host, login), self.options)
        try:
            return await shell.run(command, self.options.connect_timeout_s + self.command_timeout_s)
        except ssh.HostUnreachable as err:
            reason = str(err.details.get("reason") or err.message)
            raise RemoteCommandFailed(
                f"{host.name}: cannot run a command as {login}: {reason}",
                {"host": host.name, "login": login, "reason": reason},
            ) from err
        finally:
            await shell.close()


@dataclass(frozen=True)
class ShellCall:
    host: str
    login: str
    command: str


class FakeHostShell:
    """Answers scripted per command (in order; the last one repeats); records every call.

    An unscripted command gets `default` (exit 127, "fake: unscripted command"). An answer
    that is an exception is raised instead (RemoteCommandFailed: an unreachable host).
    """

    def __init__(self, default: CommandResult | None = None) -> None:
        self.calls: list[ShellCall] = []
        self.default = default or CommandResult(127, "", "fake: unscripted command\n")
        self._answers: dict[str, list[CommandResult | Exception]] = {}

    def script(self, command: str, *answers: CommandResult | Exception) -> None:
        self._answers.setdefault(command, []).extend(answers)

    @property
    def commands(self) -> list[str]:
        return [call.command for call in self.calls]

    async def run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        self.calls.append(ShellCall(host.name, login, command))
        queue = self._answers.get(command)
        if not queue:
            return self.default
        answer = queue.pop(0) if len(queue) > 1 else queue[0]
        if isinstance(answer, Exception):
            raise answer
        return answer
