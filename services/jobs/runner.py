"""Run job tasks on hosts over SSH as the job owner's account (`TaskRunner`).

The scripts, their arguments and their answers are `services.jobs.scripts` (the protocol);
this module logs in as the owner, one persistent connection per (host, login), runs them with
a deadline, and turns an unreachable host or an answer that makes no sense into
`TaskRemoteFailed` saying what to do.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import asyncssh

from services.jobs.scripts import (
    Probe,
    Started,
    log_command,
    parse_log,
    parse_signal,
    parse_started,
    parse_status,
    signal_command,
    start_command,
    status_command,
)
from services.shared.config import HostConfig, Settings
from services.shared.errors import register_error
from services.shared.remote.ssh import (
    CommandResult,
    HostShell,
    HostUnreachable,
    SshHostShell,
    SshOptions,
)


@register_error
class TaskRemoteFailed(HostUnreachable):
    """A task's command could not be run on a host as its owner, or its answer made no sense.

    `message` says why in words a person can act on, `details` holds host, login and reason.
    Subclasses HostUnreachable, so code that retries unreachable hosts retries these.
    """

    code = "task_remote_failed"


# --- running them -------------------------------------------------------------------------------

# Builds the shell for one (host, login): the HostConfig has `user` = the login and `key_file`
# = the key to use. Unit tests pass one that returns ssh.FakeHostShell.
ShellFactory = Callable[[HostConfig], HostShell]


@dataclass
class _Entry:
    target: HostConfig
    shell: HostShell
    last_used: float
    busy: int = 0


class TaskRunner:
    """Runs the scripts as the owner on a host over SSH.

    One persistent connection per (host, login) through the `[ssh]` options and known_hosts;
    a connection idle for `idle_close_s` is closed at the next call. The key is `ssh.key_file`
    (empty: the host's key_file) for logins other than the host's management user, and
    `host.key_file` for that user. A command that cannot run, or whose
    answer makes no sense, raises TaskRemoteFailed saying what to do.
    """

    def __init__(
        self,
        settings: Settings,
        *,
        command_timeout_s: float = 30.0,
        shells: ShellFactory | None = None,
        idle_close_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.options = SshOptions.from_settings(settings.ssh)
        self.command_timeout_s = command_timeout_s
        self.idle_close_s = idle_close_s
        self._factory: ShellFactory = shells or (lambda target: SshHostShell(target, self.options))
        self._clock = clock
        self._shells: dict[tuple[str, str], _Entry] = {}

    @property
    def state_dir(self) -> str:
        return self.settings.jobs.state_dir

    # -- connections ------------------------------------------------------------------------

    async def _close_idle(self) -> None:
        now = self._clock()
        idle = [
            key
            for key, entry in self._shells.items()
            if not entry.busy and now - entry.last_used >= self.idle_close_s
        ]
        for key in idle:
            await self._shells.pop(key).shell.close()

    async def _entry(self, host: HostConfig, login: str) -> _Entry:
        await self._close_idle()
        target = self.options.as_login(host, login)
        key = (host.name, login)
        entry = self._shells.get(key)
        if entry is not None and entry.target != target:  # the host's settings changed
            if not entry.busy:
                await entry.shell.close()
            entry = None
        if entry is None:
            entry = self._shells[key] = _Entry(target, self._factory(target), self._clock())
        return entry

    async def _run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        if not login:
            raise ValueError("the login user is needed")
        entry = await self._entry(host, login)
        entry.busy += 1
        try:
            timeout = self.options.connect_timeout_s + self.command_timeout_s
            return await entry.shell.run(command, timeout)
        except HostUnreachable as err:
            raise self._unreachable(host, login, err) from err
        finally:
            entry.busy -= 1
            entry.last_used = self._clock()

    @staticmethod
    def _unreachable(host: HostConfig, login: str, err: HostUnreachable) -> TaskRemoteFailed:
        if isinstance(err.__cause__, asyncssh.PermissionDenied):
            reason = f"authentication refused (add `warden key` to ~{login}/.ssh/authorized_keys)"
            message = f"{host.name}: cannot log in as {login}: {reason}"
        else:
            reason = str(err.details.get("reason") or err.message)
            message = f"{host.name}: cannot run a command as {login}: {reason}"
        return TaskRemoteFailed(message, {"host": host.name, "login": login, "reason": reason})

    @staticmethod
    def _no_answer(
        result: CommandResult, host: HostConfig, login: str, what: str
    ) -> TaskRemoteFailed:
        said = next(
            (
                line.strip()
                for text in (result.stderr, result.stdout)
                for line in text.splitlines()
                if line.strip()
            ),
            "no output",
        )
        reason = f"{what} gave no answer (exit status {result.exit_status}: {said[:200]})"
        return TaskRemoteFailed(
            f"{host.name}: {reason}", {"host": host.name, "login": login, "reason": reason}
        )

    async def close(self) -> None:
        entries = list(self._shells.values())
        self._shells.clear()
        for entry in entries:
            await entry.shell.close()

    # -- the operations ---------------------------------------------------------------------

    async def start(
        self,
        host: HostConfig,
        login: str,
        session: str,
        cwd: str,
        command: str,
        env: Mapping[str, str],
    ) -> Started:
        """Start the task in a detached session (screen or tmux, from settings.jobs)."""
        line = start_command(
            self.settings.jobs.multiplexer, session, self.state_dir, cwd, command, env
        )
        result = await self._run(host, login, line)
        started = parse_started(result)
        if started is None:
            raise self._no_answer(result, host, login, f"starting {session}")
        return started

    async def poll(self, host: HostConfig, login: str, sessions: Sequence[str]) -> dict[str, Probe]:
        """The state of each of `login`'s `sessions` on `host`, in one round trip."""
        if not sessions:
            return {}
        result = await self._run(host, login, status_command(self.state_dir, sessions))
        probes = parse_status(result)
        if probes is None or any(s not in probes for s in sessions):
            raise self._no_answer(result, host, login, "the task status")
        return {s: probes[s] for s in sessions}

    async def signal(self, host: HostConfig, login: str, session: str, signal: str) -> str:
        """Signal the task's process group: signalled, gone or failed."""
        result = await self._run(host, login, signal_command(self.state_dir, session, signal))
        answer = parse_signal(result)
        if answer is None or answer == "invalid":
            raise self._no_answer(result, host, login, f"signalling {session}")
        return answer

    async def log_tail(
        self, host: HostConfig, login: str, session: str, max_bytes: int = 65536
    ) -> str:
        """The last `max_bytes` of the task's output ("" when it has no log)."""
        result = await self._run(host, login, log_command(self.state_dir, session, max_bytes))
        text = parse_log(result)
        if text is None:
            raise self._no_answer(result, host, login, f"the log of {session}")
        return text
