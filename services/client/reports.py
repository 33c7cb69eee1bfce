"""`warden report`: GPU usage per user, group, host or GPU model over a period
(`GET /reports/usage`): a table, `--csv` (the columns of `/reports/usage.csv`) or `--json`."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime, time
from typing import Any

from rich.console import RenderableType

from services.client.args import Subcommands, json_flag
from services.client.columns import Cell, Column
from services.client.output import console, print_json
from services.client.render import NONE, WIDE, make_table
from services.client.session import stored_api

GROUPINGS = ("user", "group", "host", "gpu_model")
# Over two lines, so that a table of every column fits 100 columns.
_HEADINGS = {
    "reserved_gpu_hours": "reserved\nGPU-h",
    "used_gpu_hours": "used\nGPU-h",
    "idle_gpu_hours": "idle\nGPU-h",
    "idle_share": "idle",
    "unreserved_gpu_hours": "unreserved\nGPU-h",
    "violations_caused": "violations\ncaused",
    "violations_suffered": "violations\nsuffered",
    "jobs": "jobs",
}


def _cell(column: str, value: Any) -> str:
    if value is None:
        return NONE
    if column == "idle_share":
        return f"{value * 100:.0f}%"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return str(value)


def _moment(value: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return None
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)


def period_text(start: str, end: str) -> str:
    """The report's period in UTC, as the dates it was asked with: `2026-11-01 to 2026-12-01
    (UTC)`, with the times when either is not at midnight."""
    moments = [_moment(start), _moment(end)]
    if None in moments:
        return f"{start} to {end}"
    utc = [m.astimezone(UTC) for m in moments if m is not None]
    if all(m.time() == time(0) for m in utc):
        return f"{utc[0]:%Y-%m-%d} to {utc[1]:%Y-%m-%d} (UTC)"
    return f"{utc[0]:%Y-%m-%d %H:%M} to {utc[1]:%Y-%m-%d %H:%M} UTC"


def report_table(report: Mapping[str, Any], width: int = WIDE) -> RenderableType:
    """The rows, then the total (pure)."""
    columns = [c for c in report["columns"] if c != "key"]
    heads = [
        Column(str(report["by"]).replace("_", " "), 8),
        *(Column(_HEADINGS.get(c, c), justify="right") for c in columns),
    ]
    rows: list[list[Cell]] = [
        [str(row["key"]), *(_cell(c, row[c]) for c in columns)] for row in report["rows"]
    ]
    rows.append(["total", *(_cell(c, report["totals"][c]) for c in columns)])
    title = f"GPU usage by {str(report['by']).replace('_', ' ')}, "
    return make_table(heads, rows, title + period_text(report["start"], report["end"]), width)


def write_csv(report: Mapping[str, Any], out: Any) -> None:
    """A header (the first column named after the grouping), the rows, then `total`."""
    columns = list(report["columns"])
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([report["by"], *columns[1:]])
    for row in [*report["rows"], report["totals"]]:
        writer.writerow(["" if row[c] is None else row[c] for c in columns])


def cmd_report(args: argparse.Namespace) -> int:
    answer = stored_api().get(
        "/reports/usage", start=args.start, end=args.end, by=args.by, user=args.user
    )
    if args.json:
        print_json(answer)
    elif args.csv:
        write_csv(answer, sys.stdout)
    elif not answer["rows"]:
        print(f"no usage from {period_text(answer['start'], answer['end'])}")
    else:
        out = console()
        out.print(report_table(answer, out.width))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"report": cmd_report}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    report = commands.add_parser(
        "report",
        parents=common,
        help="GPU usage per user, group, host or GPU model over a period",
        description="GPU-hours reserved, used and idle, used without a reservation, violations "
        "and jobs. Admins see everyone; others their own figures.",
    )
    report.add_argument("--start", help="a date (2026-11-01, midnight UTC) or ISO time; "
                        "default: 30 days before --end")  # fmt: skip
    report.add_argument("--end", help="exclusive; a date or ISO time; default: now")
    report.add_argument("--by", choices=GROUPINGS, default="user", help="default: user")
    report.add_argument("--user", help="only this user (admins; others see only their own)")
    report.add_argument("--csv", action="store_true", help="CSV on stdout (a header row)")
    json_flag(report)
