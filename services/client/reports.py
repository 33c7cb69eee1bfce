"""`warden report`: GPU usage per user, group, host or GPU model over a period
(`GET /reports/usage`): a table, `--csv` (the columns of `/reports/usage.csv`) or `--json`."""

from __future__ import annotations

import argparse
import csv
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.table import Table

from services.client.args import Subcommands, json_flag
from services.client.output import console, print_json
from services.client.render import NONE, printable
from services.client.session import stored_api

GROUPINGS = ("user", "group", "host", "gpu_model")
_HEADINGS = {
    "reserved_gpu_hours": "reserved GPU-h",
    "used_gpu_hours": "used GPU-h",
    "idle_gpu_hours": "idle GPU-h",
    "idle_share": "idle",
    "unreserved_gpu_hours": "unreserved GPU-h",
    "violations_caused": "violations caused",
    "violations_suffered": "suffered",
    "jobs": "jobs",
}


def _cell(column: str, value: Any) -> str:
    if value is None:
        return NONE
    if column == "idle_share":
        return f"{value * 100:.0f}%"
    if isinstance(value, float):
        return f"{value:,.1f}"
    return printable(str(value))


def report_table(report: Mapping[str, Any]) -> Table:
    """The rows, then the total in bold (pure)."""
    columns = [c for c in report["columns"] if c != "key"]
    table = Table(title=f"GPU usage by {report['by']}, {report['start']} to {report['end']}")
    table.add_column(report["by"])
    for column in columns:
        table.add_column(_HEADINGS.get(column, column), justify="right")
    for row in report["rows"]:
        table.add_row(printable(str(row["key"])), *(_cell(c, row[c]) for c in columns))
    totals = report["totals"]
    table.add_row("total", *(_cell(c, totals[c]) for c in columns), style="bold")
    return table


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
        print(f"no usage from {answer['start']} to {answer['end']}")
    else:
        console().print(report_table(answer))
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
