"""`warden idle`: your reservations told idle that wait for an answer (`GET /api/v1/me/idle`),
`--keep ID` ("I still need it") or `--release ID` ("release now") to answer one, and `--stats`
(admins): how often each user kept or released idle bookings (`GET /api/v1/idle/stats`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from services.client.args import Subcommands, json_flag
from services.client.output import print_json
from services.client.session import stored_api


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
            print(
                f"reservation {reservation} kept: not asked again until {answer['snoozed_until']}"
            )
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
    for notice in notices:
        print(
            f"#{notice['id']} {notice['title']}: idle since {notice['idle_since']}, released at "
            f"{notice['release_at']} unless you run `warden idle --keep {notice['id']}`"
        )
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
