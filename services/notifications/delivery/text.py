"""Text that fits a chat service's limits, whatever a command line holds (and `one_line`: text
safe for a mail header or body line).

Lengths are counted in UTF-16 code units, which is what the JavaScript-based services count and
never less than the code points the others count. Text shown on one line is cleaned so that a
command cannot add lines, reorder what is shown, or break out of a Markdown code block.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence

# The services' documented limits, in UTF-16 code units (see `units`).
SLACK_SECTION_CHARS = 3000  # a section block's text (longer: HTTP 400 invalid_blocks)
SLACK_TEXT_CHARS = 40_000  # the top-level `text`
MATTERMOST_TEXT_CHARS = 16_383
DISCORD_CONTENT_CHARS = 2000
DISCORD_TITLE_CHARS = 256
DISCORD_DESCRIPTION_CHARS = 4096
DISCORD_FIELD_NAME_CHARS = 256
DISCORD_FIELD_VALUE_CHARS = 1024
DISCORD_FIELDS = 25
DISCORD_EMBED_TOTAL_CHARS = 6000  # title, description, field names and values, footer, author
DISCORD_USERNAME = "Warden"
TEAMS_MAX_BYTES = 28_000  # a Teams message, card included, is at most about 28 KB
ADAPTIVE_CARD_SCHEMA = "http://adaptivecards.io/schemas/adaptive-card.json"
ADAPTIVE_CARD_VERSION = "1.4"  # what Teams renders in Workflows posts
ADAPTIVE_CARD_TYPE = "application/vnd.microsoft.card.adaptive"

_BIDI_CONTROLS = frozenset("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069")
_LINE_BREAKING = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def clip(text: str, limit: int) -> str:
    """At most `limit` UTF-16 code units; "…" marks a cut (a surrogate pair is never split)."""
    if units(text) <= limit:
        return text
    head = text.encode("utf-16-le")[: 2 * (limit - 1)].decode("utf-16-le", errors="ignore")
    return head + "…"


def clean(text: str) -> str:
    """One line of valid Unicode: control characters, line separators and bidi overrides
    become a space (a command cannot add lines or reorder what is shown), lone surrogates "?"."""
    return _LINE_BREAKING.sub(" ", _LONE_SURROGATE.sub("?", text))


def line(text: str, limit: int) -> str:
    return clip(clean(clip(text, limit)), limit)


def no_fence(text: str) -> str:
    """A command shown inside a Markdown code block cannot close it."""
    return text.replace("`", "\u02cb")  # MODIFIER LETTER GRAVE ACCENT looks the same


def _more(hidden: int) -> str:
    return f"… and {hidden} more process{'es' if hidden != 1 else ''}"


_MORE_RESERVE = 40  # units kept free for the `_more` line


def bounded(lines: Sequence[str], *, max_lines: int, budget: int) -> list[str]:
    """The first lines that fit in `budget` units (a newline after each) and `max_lines`,
    then "… and N more processes" when some were left out."""
    kept: list[str] = []
    used = 0
    for i, text in enumerate(lines):
        cost = units(text) + 1
        reserve = _MORE_RESERVE if i < len(lines) - 1 else 0
        if len(kept) >= max_lines or used + cost + reserve > budget:
            break
        kept.append(text)
        used += cost
    if len(kept) < len(lines):
        kept.append(_more(len(lines) - len(kept)))
    return kept


def one_line(text: str) -> str:
    """`text` without anything a mail header or a line of body could break on.

    Line breaks of any kind (CR, LF, VT, FF, NEL, U+2028...), other control characters and
    bidi overrides become a space, so a username or command can never start a new header.
    """
    return "".join(
        " " if unicodedata.category(c) in ("Cc", "Zl", "Zp") or c in _BIDI_CONTROLS else c
        for c in text
    )
