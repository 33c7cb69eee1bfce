"""The violation actions' remote scripts (`services.violations.scripts`) on a simulated host.

They arrive as `[sudo -n] sh -c <SCRIPT> warden <args>` with SCRIPT one of that module's
constants: WHO lists the terminal sessions opened with `SimFleet.login(host, user)` in
`who`'s layout; WRITE_TTY appends the message to the session's `tty_messages` when the owner
matches; SIGNAL checks the owner and start time as the real script does (`now - etimes` on the
host clock) and stops the process (SIGTERM not when it was started with
`ignore_sigterm=True`; SIGKILL always). Without sudo, only the login's own terminals and
processes can be written to or signalled (root: any), and any terminal by a login in group
tty (`SimFleet.tty_group`: the management user, as on a host set up for Warden).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from services.sim.host import SimHost, TerminalSession
from services.sim.shell import CommandResult, is_number, line_of
from services.violations.scripts import (
    SCRIPT_NAME,
    SIGNAL_SCRIPT,
    SIGNALS,
    TTY_RE,
    WHO_SCRIPT,
    WRITE_TTY_SCRIPT,
)

LOGIN_ADDRESS = "192.0.2.10"  # where simulated terminal sessions come from (TEST-NET-1)
# Where dash's error messages (`warden: LINE: ...`) say the scripts failed.
_KILL_LINE = line_of(SIGNAL_SCRIPT, "kill -s")
_WRITE_LINE = line_of(WRITE_TTY_SCRIPT, "printf")


def answer(
    host: SimHost,
    script: str,
    args: list[str],
    *,
    as_root: bool,
    login: str | None,
    now: float,
    stop: Callable[[int, int], None],
    emit: Callable[[str], None],
    in_tty_group: bool = False,
) -> CommandResult | None:
    """WHO, WRITE_TTY or SIGNAL run by `login` (None: root; `as_root`: also with sudo); None for
    another script or a wrong number of arguments. `stop(pid, exit_code)` ends a process,
    `emit(what)` tells the fleet's listeners what changed; `in_tty_group`: the login may write
    to any terminal."""
    if script == WHO_SCRIPT and not args:
        return CommandResult(_who(host.sessions.values()), "", 0)
    if script == WRITE_TTY_SCRIPT and len(args) == 3:
        writes_any = as_root or in_tty_group
        return _write_tty(host, args[0], args[1], args[2], writes_any, login, emit)
    if script == SIGNAL_SCRIPT and len(args) == 5:
        return _signal(host, args, as_root, login, now, stop)
    return None


def _who(sessions: Iterable[TerminalSession]) -> str:
    """`LC_ALL=C who`: name (8 wide), line (12 wide), `%b %e %H:%M`, (address)."""
    lines = []
    for session in sessions:
        stamp = time.gmtime(session.login_at)
        when = f"{time.strftime('%b', stamp)} {stamp.tm_mday:>2} {stamp.tm_hour:02d}:"
        when += f"{stamp.tm_min:02d}"
        lines.append(f"{session.user:<8} {session.tty:<12} {when} ({LOGIN_ADDRESS})\n")
    return "".join(lines)


def _write_tty(
    host: SimHost,
    tty: str,
    owner: str,
    message: str,
    writes_any: bool,
    login: str | None,
    emit: Callable[[str], None],
) -> CommandResult:
    if not TTY_RE.fullmatch(tty):
        return CommandResult("invalid\n", "", 2)
    session = host.sessions.get(tty)
    if session is None:  # /dev/ttyN always exists (root's while nobody is logged in)
        return CommandResult("not-owner root\n" if tty.startswith("tty") else "gone\n", "", 0)
    if session.user != owner:
        return CommandResult(f"not-owner {session.user}\n", "", 0)
    if not writes_any and login != session.user:
        denied = f"{SCRIPT_NAME}: {_WRITE_LINE}: cannot create /dev/{tty}: Permission denied\n"
        return CommandResult("failed\n", denied, 1)
    session.messages.append(message)
    emit("ttys")
    return CommandResult("written\n", "", 0)


def _signal(
    host: SimHost,
    args: list[str],
    as_root: bool,
    login: str | None,
    now: float,
    stop: Callable[[int, int], None],
) -> CommandResult:
    pid_text, user, start_text, tolerance_text, signal = args
    if (
        signal not in SIGNALS
        or not is_number(pid_text)
        or not is_number(tolerance_text)
        or (start_text and not is_number(start_text))
    ):
        return CommandResult("invalid\n", "", 2)
    pid = int(pid_text)
    proc = next((p for p in host.processes(now) if p.pid == pid), None)
    if proc is None:
        return CommandResult("gone\n", "", 0)
    # As the real script: the host clock (whole seconds) minus ps's etimes.
    started = int(now) - max(0, int(now - proc.started_at))
    if not start_text or proc.user != user or abs(started - int(start_text)) > int(tolerance_text):
        return CommandResult(f"mismatch {proc.user} {started}\n", "", 0)
    if not as_root and login != proc.user:
        denied = f"{SCRIPT_NAME}: {_KILL_LINE}: kill: Operation not permitted\n"
        return CommandResult("failed\n", denied, 1)
    if signal == "KILL" or (signal == "TERM" and not proc.ignore_sigterm):
        stop(pid, 137 if signal == "KILL" else 143)
    return CommandResult("signalled\n", "", 0)
