"""`warden queue`: the jobs queue in the order jobs get GPUs (`GET /api/v1/queue`): why each
job waits and when it is predicted to start, then each user's share and recent usage;
`--watch` draws it again every few seconds until Ctrl-C."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from rich.console import Group
from rich.live import Live
from rich.table import Table

from services.client.args import Subcommands, json_flag, positive_int
from services.client.columns import Cell, Column, fitted_table
from services.client.output import console, print_json, utc_now
from services.client.render import NONE, WIDE, when
from services.client.session import stored_api

QUEUE_COLUMNS = (
    Column("#", justify="right"),
    Column("JOB", justify="right"),
    Column("OWNER"),
    Column("NAME", 8),
    Column("GPUS", justify="right"),
    Column("QUEUED"),
    Column("STARTS"),
    Column("WHY IT WAITS", 12),
)
USER_COLUMNS = (
    Column("USER"),
    Column("SHARE", justify="right"),
    Column("GPU-H", justify="right"),
    Column("RUNNING", justify="right"),
    Column("QUEUED", justify="right"),
)


def predicted(value: str | None, now: datetime, tz: tzinfo | None = None) -> str:
    """A predicted start, or that there is none within the forecast's horizon."""
    return when(value, now, tz) if value else "not within horizon"


def queue_rows(
    jobs: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> list[list[Cell]]:
    return [
        [
            str(j.get("position", "?")),
            str(j.get("id", "?")),
            str(j.get("owner", "?")),
            str(j.get("name") or ""),
            str(j.get("gpus", NONE)),
            when(j.get("enqueued_at"), now, tz),
            predicted(j.get("predicted_start"), now, tz),
            str(j.get("reason") or ""),
        ]
        for j in jobs
    ]


def user_rows(users: Iterable[Mapping[str, Any]]) -> list[list[Cell]]:
    return [
        [
            str(u.get("user", "?")),
            f"{float(u.get('share') or 0) * 100:.0f}%",
            f"{float(u.get('usage_gpu_h') or 0):.1f}",
            str(u.get("running", NONE)),
            str(u.get("queued", NONE)),
        ]
        for u in users
    ]


def queue_view(
    answer: Mapping[str, Any], now: datetime, tz: tzinfo | None = None, width: int = WIDE
) -> Group | str:
    """The queue's table, then the users' (pure)."""
    half_life = float(answer.get("half_life_h") or 0)
    heading = f"policy: {answer.get('policy', '?')}" + (
        f", usage half-life {half_life:g} h" if answer.get("policy") == "fair" else ""
    )
    jobs = answer.get("jobs") or []
    parts: list[Table | str] = [heading]
    if jobs:
        parts.append(fitted_table(QUEUE_COLUMNS, queue_rows(jobs, now, tz), width))
    else:
        parts.append("no job waits in the queue")
    users = answer.get("users") or []
    if users:
        parts.append(fitted_table(USER_COLUMNS, user_rows(users), width))
    return Group(*parts)


def cmd_queue(args: argparse.Namespace) -> int:
    api = stored_api()
    if args.json:
        print_json(api.get("/queue"))
        return 0
    out = console()
    if args.watch is None:
        out.print(queue_view(api.get("/queue"), utc_now(), width=out.width))
        return 0
    with Live(console=out, auto_refresh=False) as live:
        try:
            while True:
                view = queue_view(api.get("/queue"), utc_now(), width=out.width)
                live.update(view, refresh=True)
                time.sleep(args.watch)
        except KeyboardInterrupt:
            return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"queue": cmd_queue}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    queue = commands.add_parser(
        "queue",
        parents=common,
        help="the jobs queue in order: why each job waits, predicted starts, users' shares",
    )
    queue.add_argument(
        "--watch",
        type=positive_int,
        nargs="?",
        const=5,
        metavar="SECONDS",
        help="draw it again every SECONDS (5) until Ctrl-C",
    )
    json_flag(queue)
