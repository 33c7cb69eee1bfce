"""The violation actions' remote-script protocol: the commands the terminal, terminate and kill
handlers run on a host, how they are built and how their answers are read. Pure: no I/O
(`actions.remote` runs them over SSH; the simulator imitates them).

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
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast

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
# The monitor's start time and the script's are each `clock - etimes` in whole seconds, each
# off by up to one second: two seconds apart is the same process.
START_TOLERANCE_S = 2
MAX_MESSAGE_CHARS = 4096

TTY_RE = re.compile(r"pts/[0-9]+|tty[0-9]+")  # whole string: use fullmatch
# C0 controls but CR and LF, DEL and C1 controls (ESC alone starts a screen-rewriting sequence).
_CONTROL_RE = re.compile(r"[\x00-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f]")


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
