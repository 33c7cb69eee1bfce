"""The shell around a command on a simulated host: what a command answers, how a remote
script's call is read (`[sudo -n] sh -c SCRIPT NAME ARGS...`), and what the scripts' shell
checks and reports (a number, the line a command failed on)."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Literal, NamedTuple

from services.jobs.scripts import SCRIPT_NAME as JOB_SCRIPT_NAME
from services.violations.scripts import SCRIPT_NAME as VIOLATION_SCRIPT_NAME

LoginShell = Literal["bash", "sh"]
UNSUPPORTED = "sim: unsupported command\n"


@dataclass(frozen=True)
class CommandResult:
    stdout: str
    stderr: str
    exit_status: int


class ScriptCall(NamedTuple):
    """`[sudo -n] sh -c SCRIPT NAME ARGS...`: which protocol's script (its $0), with what."""

    name: str
    script: str
    args: list[str]
    sudo: bool


def script_call(command: str) -> ScriptCall | None:
    """The call in `command` when NAME is `warden` (violations) or `warden-job` (jobs); None for
    any other command."""
    try:
        argv = shlex.split(command)
    except ValueError:
        return None
    sudo = argv[:2] == ["sudo", "-n"]
    if sudo:
        argv = argv[2:]
    if (
        len(argv) < 4
        or argv[:2] != ["sh", "-c"]
        or argv[3] not in (VIOLATION_SCRIPT_NAME, JOB_SCRIPT_NAME)
    ):
        return None
    return ScriptCall(argv[3], argv[2], argv[4:], sudo)


def is_number(text: str) -> bool:
    """What the scripts' `number` accepts: ASCII digits, no leading zero."""
    return bool(re.fullmatch(r"0|[1-9][0-9]*", text))


def line_of(script: str, needle: str) -> int:
    """The line of `script` that holds `needle` (1 when none does): where dash and bash say a
    command of a `-c` script failed."""
    for number, line in enumerate(script.split("\n"), start=1):
        if needle in line:
            return number
    return 1
