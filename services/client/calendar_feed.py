"""`warden calendar-feed`: the signed-in user's secret calendar address (`POST
/api/v1/me/calendar-feed`), or `--revoke` to end it (`DELETE`). A new address replaces the old
one; it is shown only when made, so the command makes a new one each time it is run."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from urllib.parse import quote

from services.client.args import Subcommands, json_flag
from services.client.output import print_json
from services.client.session import stored_api


def feed_url(url: str, watch: Sequence[str]) -> str:
    """The address with the GPUs to watch (`?gpus=host:0,host:1`) when there are any."""
    gpus = [part.strip() for item in watch for part in item.split(",") if part.strip()]
    return f"{url}?gpus={quote(','.join(gpus), safe=':,')}" if gpus else url


def cmd_calendar_feed(args: argparse.Namespace) -> int:
    api = stored_api()
    if args.revoke:
        api.delete("/me/calendar-feed")
        if args.json:
            print_json({"revoked": True})
        else:
            print("calendar feed revoked: its address now answers 404")
        return 0
    answer = api.post("/me/calendar-feed")
    url = feed_url(answer["url"], args.watch or ())
    if args.json:
        print_json({"url": url})
        return 0
    print(url)
    print(
        "Subscribe to it by URL in your calendar (it is a secret: anyone with it sees your "
        "bookings). Any older address stopped working; `warden calendar-feed --revoke` ends "
        "this one."
    )
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"calendar-feed": cmd_calendar_feed}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    feed = commands.add_parser(
        "calendar-feed",
        parents=common,
        help="a new secret iCalendar address of your reservations (replaces the old one)",
    )
    feed.add_argument("--revoke", action="store_true", help="end your feed's address instead")
    feed.add_argument(
        "--watch",
        metavar="HOST:INDEX[,...]",
        action="append",
        help="also list everyone's reservations on these GPUs (repeatable)",
    )
    json_flag(feed)
