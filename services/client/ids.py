"""Long ids made short, as git does with commits (pure): a table shows each id by its first
`SHORT` characters (more where two shown ids share them), and a command takes any prefix of
at least `SHORT` characters that only one id starts with."""

from __future__ import annotations

from collections.abc import Iterable

from services.client.api import ClientError
from services.client.args import UsageError

SHORT = 8


class NoSuchId(ClientError):
    """No id starts with the prefix given (exit status 1)."""


def short_ids(ids: Iterable[str], least: int = SHORT) -> dict[str, str]:
    """Each id's shortest prefix of at least `least` characters that no other id starts with."""
    ordered = sorted(set(ids))
    short: dict[str, str] = {}
    for i, full in enumerate(ordered):
        # Sorted, an id shares the longest prefix with one of its neighbours.
        shared = max(
            (_common(full, ordered[j]) for j in (i - 1, i + 1) if 0 <= j < len(ordered)),
            default=0,
        )
        short[full] = full[: max(least, shared + 1)]
    return short


def _common(a: str, b: str) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def match_prefix(prefix: str, ids: Iterable[str], what: str) -> str:
    """The one id of `ids` that starts with `prefix`; UsageError for a prefix too short or
    matching several, NoSuchId for none."""
    wanted = prefix.strip().lower()
    if len(wanted) < SHORT:
        raise UsageError(f"{prefix!r}: give at least the first {SHORT} characters of the {what} id")
    found = sorted({full for full in ids if full.lower().startswith(wanted)})
    if not found:
        raise NoSuchId(f"no {what} with an id starting with {prefix} (that you may see)")
    if len(found) > 1:
        shown = ", ".join(found[:5]) + (", ..." if len(found) > 5 else "")
        raise UsageError(f"{prefix} is ambiguous: {len(found)} {what} ids start with it ({shown})")
    return found[0]
