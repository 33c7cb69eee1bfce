"""Where a client command's answer goes: a rich console or the API's JSON on stdout, and a
note when a listing was cut to one page."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from rich.console import Console

PAGE = 500  # the API's largest page


def console() -> Console:
    """Stdout as it is now, as wide as `$COLUMNS` says, else as the terminal, else (a pipe)
    200 columns. Tables fit it: `console().width` is what they are made for."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        width: int | None = int(columns)
    else:
        width = None if sys.stdout.isatty() else 200
    return Console(file=sys.stdout, width=width, highlight=False)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def utc_now() -> datetime:
    """The moment a command's tables count "today" and "now" from."""
    return datetime.now(UTC)


def page_note(answer: Mapping[str, Any], what: str) -> None:
    """A listing asks for one `PAGE`: say so when the API has more."""
    shown, total = len(answer.get("items") or ()), answer.get("total")
    if isinstance(total, int) and total > shown:
        print(f"(the first {shown} of {total} {what})")
