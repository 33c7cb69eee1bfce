"""Writing TOML: the one place Warden turns settings into a config file (the demo, the simulator's
hosts snippet, and every test and benchmark that writes a config).

Values are strings, bools, ints, floats, lists of those, nested tables (dicts) and arrays of
tables (lists of dicts, `[[hosts]]`). Tables and arrays of tables come after a table's plain
keys, as TOML needs. Reading stays with `tomllib`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any


def value(item: Any) -> str:
    """One TOML value: a JSON string or number is a valid TOML one, and so is a list of them."""
    if isinstance(item, bool):
        return "true" if item else "false"
    if isinstance(item, int | str):
        return json.dumps(item)
    if isinstance(item, float):
        if not math.isfinite(item):
            raise ValueError(f"TOML has no value for {item!r} in Warden's configs")
        return repr(item)
    if isinstance(item, Sequence):
        return "[" + ", ".join(value(element) for element in item) + "]"
    raise TypeError(f"not a TOML value: {item!r}")


def _is_table_array(item: Any) -> bool:
    return (
        isinstance(item, Sequence)
        and not isinstance(item, str)
        and bool(item)
        and all(isinstance(element, Mapping) for element in item)
    )


def _key(name: str) -> str:
    bare = name and all(c.isalnum() or c in "_-" for c in name)
    return name if bare else json.dumps(name)


def _table(lines: list[str], path: list[str], table: Mapping[str, Any]) -> None:
    plain = {
        k: v for k, v in table.items() if not isinstance(v, Mapping) and not _is_table_array(v)
    }
    lines.extend(f"{_key(k)} = {value(v)}" for k, v in plain.items() if v is not None)
    for name, item in table.items():
        here = [*path, _key(name)]
        if isinstance(item, Mapping):
            lines.extend(["", f"[{'.'.join(here)}]"])
            _table(lines, here, item)
        elif _is_table_array(item):
            for element in item:
                lines.extend(["", f"[[{'.'.join(here)}]]"])
                _table(lines, here, element)


def dumps(document: Mapping[str, Any], *, header: str = "") -> str:
    """`document` as TOML text; `header` (one or more lines) becomes leading `#` comments."""
    lines = [f"# {line}".rstrip() for line in header.splitlines()]
    _table(lines, [], document)
    return "\n".join(lines).strip("\n") + "\n"
