"""Tables that fit the terminal: one line per row, the columns that may give way cut with an
ellipsis (pure). A column's natural width is its widest line; when a row is wider than the
terminal, the widest column that may shrink loses a character, again and again, until the row
fits or every such column is down to its floor (as nvitop and gpustat keep one line per GPU).
`--json` has every value whole.

A cell is a string (one line), or a tuple of strings: its lines (a job's tasks). Text from the
API reaches the terminal only through `printable`, line by line: a title with a newline in it
is one line, with `\\n` shown.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from rich.cells import cell_len
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

GAP = 2  # the spaces between two columns
Cell = str | tuple[str, ...]


def printable(text: str) -> str:
    """`text` with every non-printable character shown as its escape (ESC as \\x1b)."""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


@dataclass(frozen=True)
class Column:
    header: str  # a "\n" in it: a heading over two lines
    floor: int | None = None  # may be cut down to this width; None: always whole
    justify: Literal["left", "right"] = "left"


def lines_of(cell: Cell) -> tuple[str, ...]:
    return (printable(cell),) if isinstance(cell, str) else tuple(printable(c) for c in cell)


def natural_widths(columns: Sequence[Column], rows: Sequence[Sequence[Cell]]) -> list[int]:
    widths = [max(cell_len(line) for line in c.header.split("\n")) for c in columns]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], *(cell_len(line) for line in lines_of(cell)))
    return widths


def fit_widths(natural: Sequence[int], floors: Sequence[int | None], width: int) -> list[int]:
    """Each column's width so that a row (with `GAP` between columns) is at most `width`:
    the widest shrinkable column gives way first, none below its floor (nor its natural
    width). A row may stay wider when every column is at its floor."""
    widths = list(natural)
    excess = sum(widths) + GAP * (len(widths) - 1) - width
    while excess > 0:
        shrinkable = [
            i for i, floor in enumerate(floors) if floor is not None and widths[i] > floor
        ]
        if not shrinkable:
            break
        widest = max(shrinkable, key=lambda i: (widths[i], i))
        widths[widest] -= 1
        excess -= 1
    return widths


def fitted_table(columns: Sequence[Column], rows: Iterable[Sequence[Cell]], width: int) -> Table:
    """A borderless table of `rows` no wider than `width` (while the floors allow it)."""
    rows = list(rows)
    widths = fit_widths(natural_widths(columns, rows), [c.floor for c in columns], width)
    table = Table(box=None, pad_edge=False, padding=(0, 1), header_style="bold")
    for column, size in zip(columns, widths, strict=True):
        table.add_column(
            column.header, width=size, no_wrap=True, overflow="ellipsis", justify=column.justify
        )
    for row in rows:
        table.add_row(*(Text("\n".join(lines_of(cell))) for cell in row))
    return table


def titled(title: str, table: Table, width: int) -> RenderableType:
    """A title line over the table, cut to the width rather than wrapped."""
    heading = Text(printable(title), style="bold", no_wrap=True, overflow="ellipsis")
    heading.truncate(width, overflow="ellipsis")
    return Group(heading, table)
