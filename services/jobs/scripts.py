"""The jobs' remote-script protocol: the scripts that run tasks on a host in detached screen or
tmux sessions as the job owner's account, how their commands are built and how their answers
are read. Pure: no I/O (`runner.TaskRunner` runs them over SSH; the simulator imitates them).

Nothing a user controls is ever read by a shell as code, except the task's own command (which
runs as its owner, who wrote it). Every remote command is

    sh -c <SCRIPT> warden-job <arg>...

built with `shlex.join`, where SCRIPT is one of the constants below (fixed text, reviewed once)
and every value (a session name, a directory, the task's command, an environment pair) reaches
the script only as a positional parameter, used in double quotes. The builders validate what
they can (a session is `warden-<job>-<task>`, a signal one of INT, TERM, USR1, KILL, 0, an
environment name `[A-Za-z_][A-Za-z0-9_]*`) and the scripts check again.

On the host, relative to the owner's home unless absolute, `<state_dir>/<session>/` (mode 700)
holds `pid` ("<pid> <start epoch>", written by the task's runner shell), `exit` (its command's
exit status, written when the command ends, also after SIGINT or SIGTERM), `log` (everything
the command printed; the previous run's is `log.1`) and `start.out` (what screen or tmux said).
The session is named `warden-<job>-<task>`: the owner attaches with `screen -x warden-12-0`
or `tmux attach -t warden-12-0`.

The runner shell is the session's first process, so it leads the session's process group:
SIGNAL signals that whole group (`kill -s INT -- -<pid>`), so `python train.py` under it gets
the SIGINT. It survives INT, TERM and USR1 itself (to write `exit`), `tee` ignores them (to keep
logging); SIGKILL ends all of them and no exit status is written (STATUS says `gone`).

A pid is trusted only while it is the same process: same owner, and the host clock minus
`ps`'s etimes within START_TOLERANCE_S of the start epoch in the pid file; otherwise the task
is gone and nothing is signalled.

The scripts print one status word on their last line (a login shell's rc files may print
before them); `parse_started`, `parse_status`, `parse_signal` and `parse_log` read them.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal, cast

from services.shared.remote.shell import CommandResult

# $0 of every script (what `ps` and error messages show), and of the runner in the session.
SCRIPT_NAME = "warden-job"
RUNNER_NAME = "warden-task"
MULTIPLEXERS = ("screen", "tmux")
SIGNALS = ("INT", "TERM", "USR1", "KILL", "0")
START_TOLERANCE_S = 2  # `date` in the runner vs. the host clock minus etimes: 1 s each way
START_WAIT_S = 5  # START waits this long for the runner's pid file
MAX_LOG_BYTES = 16 * 1024 * 1024
# Ends LOG's output (and starts it: rc files may print before); not a line a log would hold.
LOG_MARK = "@@warden-task-log-3f9c"

SESSION_RE = re.compile(r"warden-(0|[1-9][0-9]*)-(0|[1-9][0-9]*)")  # whole string: fullmatch
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")

# Shared by the scripts (each constant holds its own copy of these functions).
_FUNCTIONS = f"""\
set -f
number() {{ case $1 in ''|*[!0-9]*|0?*) return 1 ;; esac; }}
valid_session() {{
    case $1 in warden-*) ;; *) return 1 ;; esac
    _rest=${{1#warden-}}
    _job=${{_rest%-*}} _task=${{_rest##*-}}
    case $_rest in *-*) ;; *) return 1 ;; esac
    number "$_job" && number "$_task"
}}
absolute() {{ case $1 in /*) printf '%s' "$1" ;; *) printf '%s/%s' "$HOME" "$1" ;; esac; }}
same() {{
    _pid=$1 _start=$2
    number "$_pid" && number "$_start" || return 1
    _row=$(LC_ALL=C ps -o uid=,etimes=,stat= -p "$_pid" 2>/dev/null) || return 1
    set -- $_row
    [ "$#" -ge 3 ] && number "$2" || return 1
    [ "$1" = "$(id -u)" ] || return 1
    case $3 in Z*) return 1 ;; esac
    _diff=$(($(date +%s) - $2 - $_start))
    [ "$_diff" -ge -{START_TOLERANCE_S} ] && [ "$_diff" -le {START_TOLERANCE_S} ]
}}
"""

# The task's process, inside the screen or tmux session. args: session directory (absolute),
# working directory (absolute), command, NAME=value pairs. Writes `pid`, then runs the command
# with its output to the terminal and appended to `log`, and writes its exit status to `exit`
# (127 when the directory cannot be entered).
# INT, TERM and USR1 go to the whole process group. This shell and the `{ }` group catch them
# (`:`), so they live on to write `exit`; a subshell resets caught traps, so each sets its
# own. The command runs in a subshell that catches them with `exit`: the program running in
# the foreground gets the signal (a program starts with caught signals at their default) and
# decides what to do (python raises KeyboardInterrupt); when it ends, the subshell exits with
# its status (`exit` in a trap keeps the status of the command before it) instead of going on
# with the rest of the command line. tee ignores them (an ignored signal stays ignored in a
# program it runs) to log to the end.
RUNNER_SCRIPT = """\
dir=$1 cwd=$2 cmd=$3
shift 3
trap : INT TERM USR1
echo "$$ $(date +%s)" >"$dir/pid.tmp" && mv -f -- "$dir/pid.tmp" "$dir/pid"
for pair do
    case ${pair%%=*} in ''|[0-9]*|*[!A-Za-z0-9_]*) continue ;; esac
    export "$pair"
done
set --
{
    trap : INT TERM USR1
    if cd -- "$cwd"; then
        (trap exit INT TERM USR1; eval "$cmd")
        code=$?
    else
        code=127
    fi
    echo "$code" >"$dir/exit.tmp" && mv -f -- "$dir/exit.tmp" "$dir/exit"
} 2>&1 | (trap '' INT TERM USR1; exec tee -a -- "$dir/log")
"""

# args: multiplexer (screen|tmux), session, state dir, working directory (empty: home),
# command, RUNNER_SCRIPT, NAME=value pairs.
# prints: started <pid> <start epoch> | exists | failed <reason words> | invalid
# `exists`: a session of that name lives, or the task's last process still runs.
START_SCRIPT = (
    _FUNCTIONS
    + f"""\
mux=$1 session=$2 state=$3 cwd=$4 cmd=$5 runner=$6
shift 6
case $mux in screen|tmux) ;; *) echo invalid; exit 2 ;; esac
if ! valid_session "$session" || [ -z "$state" ] || [ -z "$cmd" ] || [ -z "$runner" ]; then
    echo invalid
    exit 2
fi
for pair do
    case $pair in *=*) ;; *) echo invalid; exit 2 ;; esac
    case ${{pair%%=*}} in ''|[0-9]*|*[!A-Za-z0-9_]*) echo invalid; exit 2 ;; esac
done
if ! command -v "$mux" >/dev/null 2>&1; then echo "failed $mux is not installed"; exit 1; fi
dir=$(absolute "$state")/$session
cwd=$(absolute "${{cwd:-$HOME}}")
case $mux in
screen)
    if LC_ALL=C screen -ls 2>/dev/null | grep -v '(Dead' \\
        | grep -q "^[[:space:]]*[0-9][0-9]*\\.$session[[:space:]]"; then
        echo exists
        exit 0
    fi ;;
tmux)
    if tmux has-session -t "=$session" >/dev/null 2>&1; then echo exists; exit 0; fi ;;
esac
if [ -f "$dir/pid" ] && [ ! -f "$dir/exit" ] && read -r pid start <"$dir/pid" \\
    && same "$pid" "$start"; then
    echo exists
    exit 0
fi
if ! (umask 077 && mkdir -p -- "$dir") || ! chmod 700 -- "$dir"; then
    echo "failed cannot create $dir"
    exit 1
fi
rm -f -- "$dir/pid" "$dir/pid.tmp" "$dir/exit" "$dir/exit.tmp"
if [ -f "$dir/log" ]; then mv -f -- "$dir/log" "$dir/log.1"; fi
: >"$dir/log"
case $mux in
screen) screen -dmS "$session" sh -c "$runner" {RUNNER_NAME} "$dir" "$cwd" "$cmd" "$@" ;;
tmux) tmux new-session -d -s "$session" sh -c "$runner" {RUNNER_NAME} "$dir" "$cwd" "$cmd" "$@" ;;
esac </dev/null >"$dir/start.out" 2>&1
rc=$?
end=$(($(date +%s) + {START_WAIT_S}))
while [ "$rc" = 0 ] && [ ! -s "$dir/pid" ] && [ "$(date +%s)" -le "$end" ]; do
    sleep 0.1 2>/dev/null || sleep 1
done
if [ -s "$dir/pid" ] && read -r pid start <"$dir/pid" && number "$pid" && number "$start"; then
    echo "started $pid $start"
    exit 0
fi
said=$(head -n 1 -- "$dir/start.out" 2>/dev/null | tr -c '[:print:]' ' ')
if [ "$rc" != 0 ]; then
    echo "failed $mux exit status $rc${{said:+: $said}}"
else
    echo "failed no pid file after {START_WAIT_S} s${{said:+: $mux said $said}}"
fi
exit 1
"""
)

# args: state dir, session names. prints per session, in order, one of
#   <session> exited <code>              (`-` when the exit file holds no number)
#   <session> running <pid> <start epoch>
#   <session> gone                       (no exit status, the process is not running)
#   <session> unknown                    (no pid file yet)
# then `ok`; or `invalid` alone.
STATUS_SCRIPT = (
    _FUNCTIONS
    + """\
state=$1
shift
if [ -z "$state" ]; then echo invalid; exit 2; fi
for session do
    if ! valid_session "$session"; then echo invalid; exit 2; fi
done
state=$(absolute "$state")
exited() {
    code=$(cat -- "$1/exit" 2>/dev/null)
    number "$code" || code=-
    echo "$2 exited $code"
}
for session do
    dir=$state/$session
    if [ -f "$dir/exit" ]; then exited "$dir" "$session"; continue; fi
    if [ ! -f "$dir/pid" ]; then echo "$session unknown"; continue; fi
    pid= start=
    read -r pid start <"$dir/pid"
    if same "$pid" "$start"; then echo "$session running $pid $start"; continue; fi
    # The command may have ended (and written exit) since the first look.
    if [ -f "$dir/exit" ]; then exited "$dir" "$session"; continue; fi
    echo "$session gone"
done
echo ok
"""
)

# args: state dir, session, signal (INT|TERM|USR1|KILL|0: only check).
# prints: signalled | gone (no pid file, or its pid is another process now) | failed | invalid
SIGNAL_SCRIPT = (
    _FUNCTIONS
    + """\
state=$1 session=$2 sig=$3
case $sig in INT|TERM|USR1|KILL|0) ;; *) echo invalid; exit 2 ;; esac
if [ -z "$state" ] || ! valid_session "$session"; then echo invalid; exit 2; fi
dir=$(absolute "$state")/$session
pid= start=
if [ ! -f "$dir/pid" ]; then echo gone; exit 0; fi
read -r pid start <"$dir/pid"
if ! same "$pid" "$start"; then echo gone; exit 0; fi
if kill -s "$sig" -- "-$pid"; then echo signalled; exit 0; fi
if ! same "$pid" "$start"; then echo gone; exit 0; fi
echo failed
exit 1
"""
)

# args: state dir, session, max bytes.
# prints: LOG_MARK begin, the last max bytes of the log, a newline, `LOG_MARK ok <size>`;
# or `LOG_MARK missing` | invalid.
LOG_SCRIPT = (
    _FUNCTIONS
    + f"""\
state=$1 session=$2 max=$3
if [ -z "$state" ] || ! valid_session "$session" || ! number "$max"; then
    echo invalid
    exit 2
fi
log=$(absolute "$state")/$session/log
if [ ! -f "$log" ]; then echo "{LOG_MARK} missing"; exit 0; fi
set -- $(wc -c <"$log")
echo "{LOG_MARK} begin"
tail -c "$max" -- "$log"
printf '\\n%s ok %s\\n' "{LOG_MARK}" "$1"
"""
)


# --- building commands ------------------------------------------------------------------------


def _command(script: str, args: Sequence[str]) -> str:
    return shlex.join(["sh", "-c", script, SCRIPT_NAME, *args])


def _text_arg(value: object, what: str, *, empty: bool, one_line: bool = True) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} must be a string, not {value!r}")
    if not empty and not value.strip():
        raise ValueError(f"{what} must not be empty")
    if "\0" in value or (one_line and any(c in value for c in "\n\r")):
        raise ValueError(f"{what} must be one line without NUL: {value!r}")
    return value


def _session(session: object) -> str:
    if not isinstance(session, str) or not SESSION_RE.fullmatch(session):
        raise ValueError(f"not a task session name: {session!r} (warden-<job>-<task>)")
    return session


def session_name(job_id: int, task_index: int) -> str:
    """`warden-<job>-<task>`: the screen or tmux session of one task."""
    for value, what in ((job_id, "job id"), (task_index, "task index")):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{what} must be a non-negative int, not {value!r}")
    return f"warden-{job_id}-{task_index}"


def start_command(
    multiplexer: str,
    session: str,
    state_dir: str,
    cwd: str,
    command: str,
    env: Mapping[str, str],
) -> str:
    """Start `command` (sh code, run by the login user) in a detached session."""
    if multiplexer not in MULTIPLEXERS:
        raise ValueError(f"multiplexer must be one of {', '.join(MULTIPLEXERS)}")
    pairs = []
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME_RE.fullmatch(name):
            raise ValueError(f"not an environment variable name: {name!r}")
        if not isinstance(value, str) or "\0" in value:
            raise ValueError(f"the value of {name} must be a string without NUL")
        pairs.append(f"{name}={value}")
    args = [
        multiplexer,
        _session(session),
        _text_arg(state_dir, "the state directory", empty=False),
        _text_arg(cwd, "the working directory", empty=True),
        _text_arg(command, "the command", empty=False, one_line=False),
        RUNNER_SCRIPT,
        *pairs,
    ]
    return _command(START_SCRIPT, args)


def status_command(state_dir: str, sessions: Sequence[str]) -> str:
    """One line per session: exited, running, gone or unknown (see STATUS_SCRIPT)."""
    if isinstance(sessions, str):
        raise ValueError("sessions must be a sequence of session names, not one string")
    state = _text_arg(state_dir, "the state directory", empty=False)
    return _command(STATUS_SCRIPT, [state, *(_session(s) for s in sessions)])


def signal_command(state_dir: str, session: str, signal: str) -> str:
    """Send `signal` to the task's process group if its pid is still the task's process."""
    if signal not in SIGNALS:
        raise ValueError(f"signal must be one of {', '.join(SIGNALS)}, not {signal!r}")
    state = _text_arg(state_dir, "the state directory", empty=False)
    return _command(SIGNAL_SCRIPT, [state, _session(session), signal])


def log_command(state_dir: str, session: str, max_bytes: int) -> str:
    """The last `max_bytes` of the task's log."""
    if (
        isinstance(max_bytes, bool)
        or not isinstance(max_bytes, int)
        or not 0 <= max_bytes <= MAX_LOG_BYTES
    ):
        raise ValueError(f"max_bytes must be an int from 0 to {MAX_LOG_BYTES}: {max_bytes!r}")
    state = _text_arg(state_dir, "the state directory", empty=False)
    return _command(LOG_SCRIPT, [state, _session(session), str(max_bytes)])


# --- reading answers ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Started:
    status: Literal["started", "exists", "failed"]
    pid: int | None = None
    started_at: datetime | None = None  # the host's clock when the task's process started
    detail: str = ""  # failed: why, in words


ProbeState = Literal["running", "exited", "gone", "unknown"]


@dataclass(frozen=True)
class Probe:
    state: ProbeState
    pid: int | None = None  # running
    started_at: datetime | None = None  # running
    exit_code: int | None = None  # exited (None: the exit file held no number)


_NUMBER_RE = re.compile(r"0|[1-9][0-9]*")
_STATUS_LINE_RE = re.compile(
    r"(?P<session>warden-[0-9]+-[0-9]+) (?P<state>[a-z]+)(?: (?P<rest>.*))?"
)


def _epoch(text: str) -> datetime:
    return datetime.fromtimestamp(int(text), UTC)


def _last_status_line(text: str, words: Sequence[str]) -> list[str] | None:
    for line in reversed(text.splitlines()):
        fields = line.split()
        if fields and fields[0] in words:
            return fields
    return None


def parse_started(result: CommandResult) -> Started | None:
    """START's answer; None when its output holds no (well-formed) status line."""
    fields = _last_status_line(result.stdout, ("started", "exists", "failed", "invalid"))
    if fields is None:
        return None
    word = fields[0]
    if word == "started":
        if len(fields) != 3 or not all(_NUMBER_RE.fullmatch(f) for f in fields[1:]):
            return None
        return Started("started", int(fields[1]), _epoch(fields[2]))
    if word == "exists":
        return Started("exists")
    if word == "invalid":
        return Started("failed", detail="the host's script refused the arguments (invalid)")
    return Started("failed", detail=" ".join(fields[1:]) or "no reason given")


def _probe(state: str, rest: str) -> Probe | None:
    fields = rest.split()
    if state == "running":
        if len(fields) != 2 or not all(_NUMBER_RE.fullmatch(f) for f in fields):
            return None
        return Probe("running", int(fields[0]), _epoch(fields[1]))
    if state == "exited":
        if len(fields) != 1:
            return None
        if fields[0] == "-":
            return Probe("exited")
        if not _NUMBER_RE.fullmatch(fields[0]):
            return None
        return Probe("exited", exit_code=int(fields[0]))
    if state in ("gone", "unknown") and not fields:
        return Probe(cast(ProbeState, state))
    return None


def parse_status(result: CommandResult) -> dict[str, Probe] | None:
    """STATUS's answer by session; None when it did not end with `ok` or a line before it
    names a session but makes no sense. Lines before the block (rc files) are skipped."""
    lines = result.stdout.splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    if not lines or lines[-1].strip() != "ok":
        return None
    found: list[tuple[str, Probe]] = []
    for line in reversed(lines[:-1]):
        match = _STATUS_LINE_RE.fullmatch(line.strip())
        if match is None:
            break  # the rc files' noise before the block
        probe = _probe(match["state"], match["rest"] or "")
        if probe is None:
            return None
        found.append((match["session"], probe))
    return dict(reversed(found))


def parse_signal(result: CommandResult) -> str | None:
    """SIGNAL's answer: signalled, gone, failed or invalid; None when there is none."""
    fields = _last_status_line(result.stdout, ("signalled", "gone", "failed", "invalid"))
    return None if fields is None else fields[0]


def parse_log(result: CommandResult) -> str | None:
    """The log's tail LOG printed ("" when the task has no log); None when there is none."""
    text = result.stdout
    end = text.rfind(f"\n{LOG_MARK} ok ")
    if end < 0:
        if _last_status_line(text, (LOG_MARK,)) == [LOG_MARK, "missing"]:
            return ""
        return None
    begin_mark = f"{LOG_MARK} begin\n"
    begin = text.find(begin_mark)
    if begin < 0 or begin > end + 1:
        return None
    return text[begin + len(begin_mark) : end]
