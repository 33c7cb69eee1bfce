"""`warden idle`: your reservations told idle that wait for an answer (`GET /api/v1/me/idle`),
`--keep ID` ("I still need it") or `--release ID` ("release now") to answer one, and `--stats`
(admins): how often each user kept or released idle bookings (`GET /api/v1/idle/stats`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any

from services.client.args import Subcommands, json_flag
from services.client.output import print_json, utc_now
from services.client.render import printable, when
from services.client.session import stored_api


def notice_line(notice: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> str:
    """An idle notice in words, its times in local time (pure)."""
    return printable(
        f"#{notice['id']} {notice['title']}: idle since {when(notice['idle_since'], now, tz)}, "
        f"released at {when(notice['release_at'], now, tz)} unless you run "
        f"`warden idle --keep {notice['id']}`"
    )


def cmd_idle(args: argparse.Namespace) -> int:
    api = stored_api()
    if args.keep is not None or args.release is not None:
        action, reservation = (
            ("keep", args.keep)
            if args.keep is not None
            else (
                "release",
                args.release,
            )
        )
        answer = api.post(f"/reservations/{reservation}/{action}")
        if args.json:
            print_json(answer)
        elif action == "keep":
            until = when(answer["snoozed_until"], utc_now())
            print(f"reservation {reservation} kept: not asked again until {until}")
        else:
            print(f"reservation {reservation} released: its GPUs are free for others now")
        return 0
    if args.stats:
        rows = api.get("/idle/stats")
        if args.json:
            print_json(rows)
            return 0
        print(f"{'user':<20} {'notices':>8} {'kept':>6} {'released':>9} {'no answer':>10}")
        for row in rows:
            print(
                f"{row['user']:<20} {row['notices']:>8} {row['kept']:>6} "
                f"{row['released_by_owner']:>9} {row['released_idle']:>10}"
            )
        return 0
    notices = api.get("/me/idle")
    if args.json:
        print_json(notices)
        return 0
    if not notices:
        print("no idle reservation waits for your answer")
    now = utc_now()
    for notice in notices:
        print(notice_line(notice, now))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"idle": cmd_idle}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    idle = commands.add_parser(
        "idle",
        parents=common,
        help="your idle reservations waiting for an answer; keep or release one",
    )
    which = idle.add_mutually_exclusive_group()
    which.add_argument("--keep", type=int, metavar="ID", help='"I still need it": keep it')
    which.add_argument("--release", type=int, metavar="ID", help="release the rest of it now")
    which.add_argument(
        "--stats", action="store_true", help="admins: how each user answered idle notices"
    )
    json_flag(idle)
