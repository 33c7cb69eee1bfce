"""The text forms of `[violations]` lists: escalation steps and allow-list entries."""

from __future__ import annotations

import re
from dataclasses import dataclass

ESCALATION_RECIPIENTS = ("offender", "owner", "admins")
# Safe by default: Warden tells people, it never stops anyone's process unless a lab opts in
# (OPT_IN_STEPS, shown commented in the file `warden init` writes). A wrongly flagged process
# loses no work; the offender and the owner hear of it at once, the admins if it lasts.
DEFAULT_STEPS = (
    "0s terminal offender",
    "0s email offender+owner",
    "0s webhook offender+owner",
    "10m email admins",
    "10m webhook admins",
)
# The default steps plus the two that act on the offender's processes: terminate (SIGTERM,
# SIGKILL after term_grace_s) and kill (SIGKILL). An example to copy, never a default.
OPT_IN_STEPS = (*DEFAULT_STEPS, "15m terminate", "20m kill")
STOPPING_ACTIONS = ("terminate", "kill")
# user:command pairs (`*` for any) whose GPU processes never violate. The command is the
# executable's base name; the user matters, so an offender cannot rename a program "Xorg".
DEFAULT_ALLOW = (
    "root:Xorg",
    "root:Xwayland",
    "root:gnome-shell",
    "gdm:*",
    "*:nvidia-persistenced",
)
_STEP = re.compile(
    r"^\s*(?P<delay>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)\s+(?P<action>[a-z][a-z0-9_-]*)"
    r"(?:\s+(?P<to>[a-z]+(?:\+[a-z]+)*))?\s*$"
)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class EscalationStep:
    """`60s email offender+admins`: after 60 s of an open incident, the e-mail handler acts."""

    after_s: float
    action: str
    recipients: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        delay = f"{self.after_s:g}s"
        return " ".join(
            [delay, self.action, *(["+".join(self.recipients)] if self.recipients else [])]
        )


def parse_step(text: str) -> EscalationStep:
    """One escalation step; ValueError says what is wrong with it."""
    found = _STEP.match(text)
    if found is None:
        raise ValueError(
            f"{text!r} is not '<delay><ms|s|m|h> <action> [recipient+recipient]', "
            "e.g. '60s email offender+admins'"
        )
    recipients = tuple(found["to"].split("+")) if found["to"] else ()
    unknown = [r for r in recipients if r not in ESCALATION_RECIPIENTS]
    if unknown:
        raise ValueError(
            f"{text!r}: unknown recipient {unknown[0]!r} "
            f"(known: {', '.join(ESCALATION_RECIPIENTS)})"
        )
    after_s = float(found["delay"]) * _UNIT_S[found["unit"]]
    return EscalationStep(after_s, found["action"], recipients)


def parse_allow_entry(text: str) -> tuple[str, str]:
    user, sep, command = text.partition(":")
    if not sep or not user or not command:
        raise ValueError(f"{text!r} is not 'user:command' ('*' matches any)")
    return user, command
