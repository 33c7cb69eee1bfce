"""`warden reserve`, `warden reservations` and `warden cancel`: reservations over the API."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

from services.client.api import ApiError
from services.client.args import (
    Subcommands,
    UsageError,
    duration_arg,
    expand_gpus,
    json_flag,
    list_word,
    positive_int,
    time_arg,
    whole_minutes,
)
from services.client.output import PAGE, console, page_note, print_json, utc_now
from services.client.render import describe_reservation, reservations_table, when
from services.client.session import my_username, stored_api

DEFAULT_TITLE = "reserved from the CLI"
DEFAULT_RANGE = timedelta(days=7)


def cmd_reservations(args: argparse.Namespace) -> int:
    api = stored_api()
    now = utc_now()
    start: datetime = args.start or now
    end: datetime = args.end or start + DEFAULT_RANGE
    if end <= start:
        raise UsageError("--to must be after --from")
    owner = None if args.all_users else my_username(api)
    answer = api.get(
        "/reservations",
        start=start.isoformat(),
        end=end.isoformat(),
        owner=owner,
        limit=PAGE,
    )
    if args.json:
        print_json(answer)
        return 0
    items = answer.get("items") or []
    span = f"from {when(start.isoformat(), now)} to {when(end.isoformat(), now)}"
    whose = "" if owner is None else f" of {owner}"
    if not items:
        print(f"no reservations{whose} {span}")
        return 0
    out = console()
    out.print(reservations_table(items, now, title=f"reservations{whose} {span}", width=out.width))
    page_note(answer, "reservations")
    return 0


def reservation_request(args: argparse.Namespace, now: datetime) -> dict[str, Any]:
    """The body of `POST /reservations` without the GPUs, from the command line."""
    start: datetime = args.start or now
    body: dict[str, Any] = {"start": start.isoformat(), "title": args.title}
    if args.duration is not None:
        body["duration_minutes"] = whole_minutes(args.duration)
    else:
        if args.end <= start:
            raise UsageError("--end must be after --start")
        body["end"] = args.end.isoformat()
    if args.description:
        body["description"] = args.description
    if args.guests:
        body["guests"] = args.guests
    return body


def cmd_reserve(args: argparse.Namespace) -> int:
    if args.gpus and args.count:
        raise UsageError("name GPUs or give --count, not both")
    if not args.gpus and not args.count:
        raise UsageError("name the GPUs (dgx1:0 dgx1:1, or uuids) or give --count N")
    if (args.host or args.same_host or args.labels) and not args.count:
        raise UsageError("--host, --same-host and --label go with --count")
    now = utc_now()
    body = reservation_request(args, now)
    api = stored_api()
    slot: dict[str, Any] = {}
    if args.count:
        if "duration_minutes" in body:
            minutes = body["duration_minutes"]
        else:
            minutes = whole_minutes(args.end - (args.start or now))
        slot = api.get(
            "/reservations/slot",
            count=args.count,
            duration_minutes=minutes,
            host=args.host,
            labels=args.labels or None,
            same_host=True if args.same_host else None,
            not_before=args.start.isoformat() if args.start else None,
        )
        body["gpus"] = [gpu["uuid"] for gpu in slot["gpus"]]
        body["start"], body["end"] = slot["start"], slot["end"]
        body.pop("duration_minutes", None)
    else:
        body["gpus"] = expand_gpus(args.gpus)
    created = api.post("/reservations", body)
    if args.json:
        print_json(created)
    else:
        print(f"reserved: {describe_reservation(created, now)}")
        if args.count and slot.get("why"):
            print(f"  ({slot['why']})")
    print_warnings(created)
    return 0


def print_warnings(created: Mapping[str, Any]) -> None:
    """GPUs someone else uses now (the reservation is made all the same): on stderr, so that
    `--json` output stays one document and a script still sees them."""
    for warning in created.get("warnings") or ():
        print(f"warning: {warning.get('message', '')}", file=sys.stderr)


def _has_started(reservation: Mapping[str, Any], now: datetime) -> bool:
    try:
        start = datetime.fromisoformat(str(reservation.get("start")))
    except ValueError:
        return False
    return reservation.get("status") == "active" and start <= now


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel; a reservation that has started (which only admins may cancel) ends now."""
    api = stored_api()
    now = utc_now()
    try:
        done = api.delete(f"/reservations/{args.id}", reason=args.reason or None)
        verb = "cancelled"
    except ApiError as err:
        if err.status != 403 or not _has_started(api.get(f"/reservations/{args.id}"), now):
            raise
        done = api.post(f"/reservations/{args.id}/end")
        verb = "it had started: ended"
    if args.json:
        print_json(done)
    else:
        print(f"{verb} {describe_reservation(done, now)}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "reserve": cmd_reserve,
    "reservations": cmd_reservations,
    "cancel": cmd_cancel,
}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    reserve = commands.add_parser(
        "reserve", parents=common, help="reserve GPUs by name, or any N free ones"
    )
    reserve.add_argument(
        "gpus", nargs="*", metavar="GPU", help="host:index (dgx1:0, or dgx1:0,1) or a GPU uuid"
    )
    reserve.add_argument(
        "--count", type=positive_int, metavar="N", help="any N GPUs: the earliest free slot"
    )
    reserve.add_argument("--host", metavar="HOST", help="with --count: on this host")
    reserve.add_argument("--same-host", action="store_true", help="with --count: all on one host")
    reserve.add_argument(
        "--label",
        dest="labels",
        action="append",
        default=[],
        metavar="LABEL",
        help="with --count: only GPUs carrying it, e.g. model=A100-80GB, arch=hopper, "
        "memory=80GB, arch!=volta (repeatable: all must match)",
    )
    reserve.add_argument(
        "--start", type=time_arg, metavar="TIME", help="now (default), +30m, 14:30 or ISO 8601"
    )
    until = reserve.add_mutually_exclusive_group(required=True)
    until.add_argument("--end", type=time_arg, metavar="TIME", help="+2h, 18:00 or ISO 8601")
    until.add_argument("--duration", type=duration_arg, metavar="SPAN", help="90m, 2h, 1d, 1h30m")
    reserve.add_argument("--title", default=DEFAULT_TITLE, help=f'default: "{DEFAULT_TITLE}"')
    reserve.add_argument("--description", default="", help="what it is for")
    reserve.add_argument(
        "--guest",
        dest="guests",
        action="append",
        default=[],
        metavar="USER",
        help="who may also use the GPUs (repeatable)",
    )
    json_flag(reserve)

    listing = commands.add_parser(
        "reservations", parents=common, help="reservations in a time range"
    )
    list_word(listing)
    whose = listing.add_mutually_exclusive_group()
    whose.add_argument("--mine", action="store_true", help="only yours (the default)")
    whose.add_argument("--all-users", action="store_true", help="everyone's")
    listing.add_argument("--from", dest="start", type=time_arg, metavar="TIME", help="default: now")
    listing.add_argument(
        "--to", dest="end", type=time_arg, metavar="TIME", help="default: 7 days after --from"
    )
    json_flag(listing)

    cancel = commands.add_parser(
        "cancel", parents=common, help="cancel a reservation (one that has started ends now)"
    )
    cancel.add_argument("id", type=positive_int, metavar="ID", help="the reservation's id")
    cancel.add_argument("--reason", metavar="TEXT", help="why (shown to whoever looks)")
    json_flag(cancel)
