"""What every request's text must be before any schema sees it.

JSON and URLs can carry what no field of Warden may hold: NUL (PostgreSQL refuses it, C
strings end at it), lone surrogates (not encodable as UTF-8), and control characters (an
escape sequence in a title rewrites the terminal of whoever lists it). Each is refused with
the field it is in (422), and so is JSON nested deeper than any request of ours goes (deep
nesting exhausts the schema's recursion). Tab, line feed and carriage return stay allowed
(descriptions and commands span lines).
"""

from __future__ import annotations

import re
from typing import Any

# C0 controls but tab, LF and CR; DEL; C1 controls; lone surrogates.
_FORBIDDEN = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
MAX_DEPTH = 32


def _name(path: list[str | int]) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or "(the whole value)"


def _why(value: str) -> str | None:
    found = _FORBIDDEN.search(value)
    if found is None:
        return None
    char = found.group()
    if char == "\x00":
        return "must not contain NUL"
    if "\ud800" <= char <= "\udfff":
        return "must not contain a lone surrogate (not valid Unicode)"
    return f"must not contain control characters (U+{ord(char):04X})"


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
            why = _why(value)
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
