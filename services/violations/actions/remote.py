"""Commands the terminal, terminate and kill handlers run on a host, and the shell they use.

Nothing an offender or a user controls is ever read by a shell as code. Every remote command is

    sh -c <SCRIPT> warden <arg>...                  (act_as = "offender")
    sudo -n sh -c <SCRIPT> warden <arg>...          (act_as = "management")

built with `shlex.join`, where SCRIPT is one of the constants below (fixed text, reviewed once)
and every value (a tty, a user name, a message, a pid, a time) reaches the script only as a
positional parameter, used in double quotes. The builders validate what they can (a tty is
`pts/N` or `ttyN`, a pid a positive int, a signal one of TERM, KILL, 0) and the scripts check
again, so a bad value is refused on either side. The terminal message loses its control
characters (escape sequences could rewrite the offender's screen) except CR and LF.

The scripts print one status word on their last line (rc files of a login shell may print
before them): `parse_who`, `parse_write_result` and `parse_signal_result` read them.

SIGNAL never kills a reused pid: it reads the process's owner and elapsed time (`ps ...
etimes`) and the clock (`date +%s`) on the host itself, and signals only when the owner is
the expected user and `now - etimes` is within a few seconds of the start time the monitor saw
(the same host clock, the same arithmetic). When that start time is unknown it refuses.

`HostShell` runs one command as one login on one host: `SshHostShell` connects per call (these
actions are rare) through the monitor's SSH options and known_hosts handling;
`FakeHostShell` answers scripted results and records every call, for unit tests.
"""

from __future__ import annotations

import dataclasses
import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, Protocol, TypeVar, cast

from services.monitor import fleet
from services.monitor.fleet import CommandResult, SshOptions
from services.shared.config import HostConfig, MonitorSettings, ViolationSettings
from services.shared.errors import register_error

__all__ = [
    "SIGNALS",
    "SIGNAL_SCRIPT",
    "START_TOLERANCE_S",
    "WHO_SCRIPT",
    "WRITE_TTY_SCRIPT",
    "CommandResult",
    "FakeHostShell",
    "HostShell",
    "RemoteCommandFailed",
    "ShellCall",
    "SignalResult",
    "SshHostShell",
    "TerminalSession",
    "WriteResult",
    "clean_message",
    "epoch_seconds",
    "failure",
    "key_file_for",
    "login_for",
    "parse_signal_result",
    "parse_who",
    "parse_write_result",
    "require",
    "signal_command",
    "who_command",
    "write_command",
]

# $0 of every script: what `ps` and error messages show for the shell.
SCRIPT_NAME = "warden"

# Who is logged in where: `user tty date time (from)`, one session a line.
WHO_SCRIPT = "LC_ALL=C who"

# args: tty (pts/N or ttyN), expected owner, message.
# prints: written | gone (no such terminal) | not-owner <user> | failed | invalid
# `timeout ... cat` writes: a terminal stopped with ^S would block a write forever.
WRITE_TTY_SCRIPT = """\
tty=$1 owner=$2 message=$3
case $tty in
pts/*) n=${tty#pts/} ;;
tty*) n=${tty#tty} ;;
*) n= ;;
esac
case $n in
''|*[!0-9]*) echo invalid; exit 2 ;;
esac
dev=/dev/$tty
if [ ! -c "$dev" ]; then echo gone; exit 0; fi
actual=$(stat -c %U -- "$dev" 2>/dev/null)
if [ "$actual" != "$owner" ]; then echo "not-owner $actual"; exit 0; fi
if printf '%s' "$message" | timeout 10 cat >"$dev"; then echo written; else echo failed; exit 1; fi
"""

# args: pid, expected user, expected start (epoch seconds on the host's clock; empty:
# unknown), tolerance in seconds, signal (TERM, KILL or 0: only check).
# prints: signalled | gone | mismatch <user> <start> | failed | invalid
# A zombie counts as gone: it has ended, only its parent has not reaped it yet.
SIGNAL_SCRIPT = """\
pid=$1 user=$2 start=$3 tolerance=$4 sig=$5
number() { case $1 in ''|*[!0-9]*|0?*) return 1 ;; esac; }
case $sig in TERM|KILL|0) ;; *) echo invalid; exit 2 ;; esac
if ! number "$pid" || ! number "$tolerance"; then echo invalid; exit 2; fi
if [ -n "$start" ] && ! number "$start"; then echo invalid; exit 2; fi
row=$(LC_ALL=C ps -o user:64=,etimes=,stat= -p "$pid" 2>/dev/null)
set -f
set -- $row
if [ "$#" -lt 3 ]; then echo gone; exit 0; fi
case $3 in Z*) echo gone; exit 0 ;; esac
if ! number "$2"; then echo invalid; exit 2; fi
now=$(date +%s)
actual=$(($now - $2))
if [ -z "$start" ]; then echo "mismatch $1 $actual"; exit 0; fi
diff=$(($actual - $start))
if [ "$diff" -lt 0 ]; then diff=$((0 - $diff)); fi
if [ "$1" != "$user" ] || [ "$diff" -gt "$tolerance" ]; then
    echo "mismatch $1 $actual"
    exit 0
fi
if [ "$sig" = 0 ]; then kill -0 "$pid"; else kill -s "$sig" "$pid"; fi
if [ "$?" = 0 ]; then echo signalled; exit 0; fi
if [ -z "$(ps -o pid= -p "$pid" 2>/dev/null)" ]; then echo gone; exit 0; fi
echo failed
exit 1
"""

SIGNALS = ("TERM", "KILL", "0")
T = TypeVar("T")
# The monitor's start time and the script's are each `clock - etimes` in whole seconds, each
# off by up to one second: two seconds apart is the same process.
START_TOLERANCE_S = 2
MAX_MESSAGE_CHARS = 4096

TTY_RE = re.compile(r"pts/[0-9]+|tty[0-9]+")  # whole string: use fullmatch
# C0 controls but CR and LF, DEL and C1 controls (ESC alone starts a screen-rewriting sequence).
_CONTROL_RE = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]")


@register_error
class RemoteCommandFailed(fleet.HostUnreachable):
    """A violation action's command could not be run on a host, or its answer made no sense.

    `message` says why in words (for the incident's timeline), `details` holds host, login and
    reason. Subclasses HostUnreachable, so code that retries unreachable hosts retries these.
    """

    code = "remote_command_failed"


# --- building commands ------------------------------------------------------------------------


def _command(script: str, args: Iterable[str], sudo: bool) -> str:
    argv = ["sh", "-c", script, SCRIPT_NAME, *args]
    return shlex.join(["sudo", "-n", *argv] if sudo else argv)


def clean_message(text: str) -> str:
    """`text` without control characters (CR and LF stay), at most MAX_MESSAGE_CHARS long."""
    return _CONTROL_RE.sub("", text)[:MAX_MESSAGE_CHARS]


def who_command(sudo: bool = False) -> str:
    return _command(WHO_SCRIPT, (), sudo)


def write_command(tty: str, owner: str, message: str, sudo: bool = False) -> str:
    """Write `message` to /dev/`tty` if `owner` owns that terminal."""
    if not isinstance(tty, str) or not TTY_RE.fullmatch(tty):
        raise ValueError(f"not a terminal name: {tty!r} (pts/N or ttyN)")
    if not owner:
        raise ValueError("the terminal's owner is needed")
    return _command(WRITE_TTY_SCRIPT, (tty, owner, clean_message(message)), sudo)


def epoch_seconds(moment: datetime) -> int:
    """Whole seconds since the epoch (a naive time is read as UTC, as the events are)."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp())


def signal_command(
    pid: int,
    user: str,
    started_at: datetime | None,
    signal: str,
    sudo: bool = False,
    *,
    tolerance_s: int = START_TOLERANCE_S,
) -> str:
    """Send `signal` to `pid` only if it is `user`'s process started at `started_at`."""
    if isinstance(pid, bool) or not isinstance(pid, int) or pid <= 0:
        raise ValueError(f"not a pid: {pid!r}")
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, not {signal!r}")
    if isinstance(tolerance_s, bool) or not isinstance(tolerance_s, int) or tolerance_s < 0:
        raise ValueError(f"tolerance must be a non-negative int: {tolerance_s!r}")
    if not user:
        raise ValueError("the process's user is needed")
    start = "" if started_at is None else str(epoch_seconds(started_at))
    return _command(SIGNAL_SCRIPT, (str(pid), user, start, str(tolerance_s), signal), sudo)


# --- reading answers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TerminalSession:
    user: str
    tty: str


SignalStatus = Literal["signalled", "gone", "mismatch", "failed", "invalid"]
WriteStatus = Literal["written", "gone", "not-owner", "failed", "invalid"]


@dataclass(frozen=True)
class SignalResult:
    status: SignalStatus
    user: str | None = None  # mismatch: whose process the pid is now
    started_at: datetime | None = None  # mismatch: when that process started (host clock)


@dataclass(frozen=True)
class WriteResult:
    status: WriteStatus
    owner: str | None = None  # not-owner: who owns the terminal now ("" when unknown)


def parse_who(text: str) -> list[TerminalSession]:
    """Terminal sessions from `who` output (pts/N and ttyN only; X displays and the like are
    skipped), in order, without repeats."""
    sessions: list[TerminalSession] = []
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 2 or not TTY_RE.fullmatch(fields[1]):
            continue
        session = TerminalSession(fields[0], fields[1])
        if session not in sessions:
            sessions.append(session)
    return sessions


def _last_status_line(text: str, words: Iterable[str]) -> list[str] | None:
    known = set(words)
    for line in reversed(text.splitlines()):
        fields = line.split()
        if fields and fields[0] in known:
            return fields
    return None


def parse_signal_result(text: str) -> SignalResult | None:
    """The SIGNAL script's answer; None when its output holds no status line."""
    fields = _last_status_line(text, ("signalled", "gone", "mismatch", "failed", "invalid"))
    if fields is None:
        return None
    if fields[0] == "mismatch":
        user = fields[1] if len(fields) > 1 else None
        started = None
        if len(fields) > 2 and fields[2].lstrip("-").isdigit():
            started = datetime.fromtimestamp(int(fields[2]), UTC)
        return SignalResult("mismatch", user, started)
    return SignalResult(cast(SignalStatus, fields[0]))


def parse_write_result(text: str) -> WriteResult | None:
    """The WRITE_TTY script's answer; None when its output holds no status line."""
    fields = _last_status_line(text, ("written", "gone", "not-owner", "failed", "invalid"))
    if fields is None:
        return None
    if fields[0] == "not-owner":
        return WriteResult("not-owner", fields[1] if len(fields) > 1 else "")
    return WriteResult(cast(WriteStatus, fields[0]))


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


def key_file_for(host: HostConfig, login: str, key_file_for_users: str) -> str:
    """The host's key for its management user, Warden's user key (if set) for anyone else."""
    if login == host.user:
        return host.key_file
    return key_file_for_users or host.key_file


def login_for(
    host: HostConfig, settings: ViolationSettings, offender: str
) -> tuple[str, bool, str]:
    """(login user, sudo?, key file) for acting on `offender`'s sessions and processes."""
    if settings.act_as == "offender":
        return offender, False, key_file_for(host, offender, settings.ssh_key_file)
    if settings.act_as == "management":
        return host.user, True, host.key_file
    raise ValueError(f"act_as must be offender or management, not {settings.act_as!r}")


# --- shells ---------------------------------------------------------------------------------


class HostShell(Protocol):
    async def run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        """Run `command` on `host` logged in as `login`; raise RemoteCommandFailed."""
        ...


class SshHostShell:
    """One SSH connection per command, with the monitor's known_hosts and connect timeout.

    The key is `host.key_file` for the host's management user and `key_file_for_users` (empty:
    `host.key_file` too) for any other login. `command_timeout_s` bounds the command once
    connected; connecting has `monitor.connect_timeout_s`.
    """

    def __init__(
        self,
        monitor: MonitorSettings,
        key_file_for_users: str = "",
        *,
        command_timeout_s: float = 30.0,
    ) -> None:
        self.options = SshOptions.from_settings(monitor)
        self.key_file_for_users = key_file_for_users
        self.command_timeout_s = command_timeout_s

    async def run(self, host: HostConfig, login: str, command: str) -> CommandResult:
        target = dataclasses.replace(
            host, user=login, key_file=key_file_for(host, login, self.key_file_for_users)
        )
        shell = fleet.SshHostShell(target, self.options)
        try:
            return await shell.run(command, self.options.connect_timeout_s + self.command_timeout_s)
        except fleet.HostUnreachable as err:
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
