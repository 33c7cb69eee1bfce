"""What every request's text must be before any schema sees it.

JSON and URLs can carry what no field of Warden may hold: NUL (PostgreSQL refuses it, C
strings end at it), lone surrogates (not encodable as UTF-8), control characters (an escape
sequence in a title rewrites the terminal of whoever lists it; a carriage return hides what
came before it), bidi overrides and isolates (U+202A-U+202E, U+2066-U+2069: they show text in
another order than it is stored) and line separators (U+2028, U+2029). Each is refused with
the field it is in (422), and so is JSON nested deeper than any request of ours goes (deep
nesting exhausts the schema's recursion). Line feed and tab are allowed only in the fields
that span lines (`MULTILINE`: descriptions, job commands); a title, a name or a query
parameter is one line.
"""

from __future__ import annotations

import re
from typing import Any

# Refused everywhere: C0 controls but tab and LF; DEL; C1 controls; line and paragraph
# separators; bidi embeddings, overrides and isolates; lone surrogates.
_FORBIDDEN = re.compile(
    r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\ud800-\udfff]"
)
_LINE_BREAKS = re.compile(r"[\t\n]")  # refused in a one-line field
# Fields (by name, wherever they are in a body) whose text spans lines.
MULTILINE = frozenset({"description", "command"})
MAX_DEPTH = 32


def _name(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(the whole value)"


def _why(value: str, multiline: bool = False) -> str | None:
    found = _FORBIDDEN.search(value) or (None if multiline else _LINE_BREAKS.search(value))
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "must not contain NUL"
    if "\ud800" <= char <= "\udfff":
        return "must not contain a lone surrogate (not valid Unicode)"
    if char in "\t\n":
        return f"must be one line (U+{ord(char):04X}: no line feed or tab)"
    if "\u202a" <= char <= "\u2069":
        return f"must not contain bidi controls or line separators (U+{ord(char):04X})"
    return f"must not contain control characters (U+{ord(char):04X})"


def _multiline(path: list[str | int]) -> bool:
    return bool(path) and path[-1] in MULTILINE


def text_problems(data: Any) -> dict[str, str]:
    """{field: reason} for each string (key or value) in `data` that may not be stored, and
    for nesting deeper than MAX_DEPTH; empty when all is well. Iterative: no recursion."""
    problems: dict[str, str] = {}
    stack: list[tuple[Any, list[str | int]]] = [(data, [])]
    while stack:
        value, path = stack.pop()
        if len(path) > MAX_DEPTH:
            problems[_name(path[:MAX_DEPTH])] = f"nested deeper than {MAX_DEPTH} levels"
            continue
        if isinstance(value, str):
            why = _why(value, _multiline(path))
            if why:
                problems[_name(path)] = why
        elif isinstance(value, dict):
            for key, item in value.items():
                why = _why(str(key))
                if why:
                    problems[_name([*path, "(a key)"])] = why
                    continue
                stack.append((item, [*path, str(key)]))
        elif isinstance(value, list):
            stack.extend((item, [*path, i]) for i, item in enumerate(value))
    return problems
