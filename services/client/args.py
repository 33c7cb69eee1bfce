"""What people type on the `warden` command line, read: durations, times, GPU lists.

The readers are pure (`now` and the local zone in, an aware datetime out); the argparse types
around them turn a mistake into a usage message, and `UsageError` is a command line wrong in a
way argparse cannot tell.
"""

from __future__ import annotations

import argparse
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TypeAlias


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot tell (exit status 2)."""


_DURATION_PART = re.compile(r"(\d+)([wdhm])")
_UNIT_MINUTES = {"w": 7 * 24 * 60, "d": 24 * 60, "h": 60, "m": 1}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")


def parse_duration(text: str) -> timedelta:
    """`90m`, `2h`, `1d`, `1w`, `1h30m`, or plain minutes (`45`); at least a minute."""
    compact = text.strip().lower().replace(" ", "")
    if compact.isdigit():
        minutes = int(compact)
    else:
        parts = _DURATION_PART.findall(compact)
        if not parts or "".join(n + u for n, u in parts) != compact:
            raise ValueError(f"not a duration: {text!r} (write 90m, 2h, 1d, 1h30m)")
        minutes = sum(int(number) * _UNIT_MINUTES[unit] for number, unit in parts)
    if minutes < 1:
        raise ValueError(f"a duration of at least a minute, not {text!r}")
    return timedelta(minutes=minutes)


def parse_time(text: str, now: datetime, tz: tzinfo | None = None) -> datetime:
    """`now`, `+30m` (from now), `HH:MM` (today, local time) or ISO 8601 (local time unless it
    names a zone): an aware datetime. `tz`: the local zone (default: the system's)."""
    value = text.strip()
    if value.lower() == "now":
        return now
    if value.startswith("+"):
        return now + parse_duration(value[1:])
    local_now = now.astimezone(tz)
    clock = _CLOCK.fullmatch(value)
    if clock:
        hour, minute = int(clock[1]), int(clock[2])
        if hour > 23 or minute > 59:
            raise ValueError(f"not a time of day: {text!r}")
        return local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (write now, +30m, 14:30 or 2026-05-04T14:30)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz) if tz is not None else parsed.astimezone()
    return parsed


def whole_minutes(span: timedelta) -> int:
    return max(1, math.ceil(span.total_seconds() / 60))


def expand_gpus(refs: Iterable[str]) -> list[str]:
    """`dgx1:0,1` → `dgx1:0`, `dgx1:1`; a uuid or `host:index` as it is."""
    found: list[str] = []
    for ref in refs:
        host, sep, indexes = ref.rpartition(":")
        if sep and host and re.fullmatch(r"\d+(,\d+)+", indexes):
            found += [f"{host}:{index}" for index in indexes.split(",")]
        else:
            found.append(ref)
    return found


# --- argparse types and flags ---------------------------------------------------------------------

# `warden`'s subcommands, which each client module adds its commands to.
Subcommands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def time_arg(text: str) -> datetime:
    try:
        return parse_time(text, datetime.now(UTC))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def duration_arg(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def index_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"at least 0, not {value}")
    return value


def list_word(parser: argparse.ArgumentParser) -> None:
    """`warden reservations list` as well as `warden reservations`, as `warden hosts list`."""
    parser.add_argument("list", nargs="?", choices=("list",), help=argparse.SUPPRESS)


def json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON")
