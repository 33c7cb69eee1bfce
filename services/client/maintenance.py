"""`warden hosts drain HOST|HOST:IDX`, `warden hosts undrain ID|HOST` (admins) and
`warden maintenance` (anyone signed in): maintenance windows over the API (`/maintenance`).

A drain refuses new bookings of the drained GPUs in its window; the owners of the bookings it
overlaps are told at once with an alternative, and their bookings are kept unless the admin
says `--bookings cancel|move`. Running jobs are not stopped unless `--stop-jobs` says so (then
they are when the window begins).
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from services.client.api import Api
from services.client.args import Subcommands, UsageError, json_flag, time_arg
from services.client.output import print_json, utc_now
from services.client.render import printable, when
from services.client.session import stored_api

PATH = "/maintenance"
OUTCOMES = {
    "kept": "kept (its owner was told, with an alternative)",
    "cancelled": "cancelled",
    "shortened": "ends when the window starts",
    "ended": "ended now",
    "moved": "moved",
    "not_moved": "kept: no alternative to move it to",
}


def parse_target(text: str) -> tuple[str, list[int] | None]:
    """`dgx1` (every GPU), `dgx1:0`, `dgx1:0,1` or `dgx1:0-3` into (host, indices) (pure)."""
    host, sep, rest = text.strip().partition(":")
    if not host or (sep and not rest):
        raise UsageError(f"not a host or host:GPU: {text!r} (write dgx1, dgx1:0 or dgx1:0,1)")
    if not sep:
        return host, None
    indices: set[int] = set()
    for part in rest.split(","):
        low, dash, high = part.partition("-")
        if not low.isdigit() or (dash and not high.isdigit()):
            raise UsageError(f"not a GPU index: {part!r} in {text!r}")
        indices.update(range(int(low), int(high if dash else low) + 1))
    return host, sorted(indices)


def window_line(window: Mapping[str, Any], now: datetime) -> str:
    """One window in words, its times in local time (pure)."""
    until = "further notice" if window["end"] is None else when(window["end"], now)
    return printable(
        f"#{window['id']} {window['target']} drained from {when(window['start'], now)} to "
        f"{until} ({window['status']}, by {window['created_by']}): {window['reason']}"
    )


def affected_line(booking: Mapping[str, Any], now: datetime) -> str:
    alternative = booking.get("alternative")
    line = (
        f"  reservation #{booking['reservation_id']} of {booking['owner']} "
        f"({when(booking['start'], now)} to {when(booking['end'], now)}): "
        f"{OUTCOMES.get(booking['outcome'], booking['outcome'])}"
    )
    if booking.get("moved_to"):
        line += f" as #{booking['moved_to']}"
    elif alternative:
        gpus = ",".join(f"{g['host']}:{g['index']}" for g in alternative["gpus"])
        line += f"; alternative {gpus} from {when(alternative['start'], now)}"
    return printable(line)


def cmd_drain(args: argparse.Namespace, api: Api) -> int:
    host, indices = parse_target(args.target)
    body: dict[str, Any] = {"host": host, "reason": args.reason, "bookings": args.bookings}
    if args.stop_jobs:
        body["stop_jobs"] = True
    if indices is not None:
        body["gpus"] = indices
    if args.start is not None:
        body["start"] = args.start.isoformat()
    if args.end is not None:
        if args.start is not None and args.end <= args.start:
            raise UsageError("--until must be after --from")
        body["end"] = args.end.isoformat()
    answer = api.post(PATH, body)
    if args.json:
        print_json(answer)
        return 0
    now = utc_now()
    print(window_line(answer, now))
    affected = answer.get("affected") or []
    if not affected:
        print("no booking overlaps it")
    else:
        print(f"{len(affected)} booking(s) overlap it; their owners are told:")
        for booking in affected:
            print(affected_line(booking, now))
    if answer.get("stop_jobs"):
        print("jobs running on the drained GPUs are stopped when the window begins")
    else:
        print("running jobs are not stopped (--stop-jobs stops them)")
    print("end the window with `warden hosts undrain`")
    return 0


def cmd_undrain(args: argparse.Namespace, api: Api) -> int:
    """End windows by id, or every window of a host (or host:IDX) not over yet."""
    if args.target.isdigit():
        ids = [int(args.target)]
    else:
        host, indices = parse_target(args.target)
        ids = [
            w["id"]
            for w in api.get(PATH)
            if w["host"] == host and (indices is None or w["gpus"] == indices)
        ]
        if not ids:
            print(f"no maintenance window of {args.target} is on or coming")
            return 1
    ended = [api.request("DELETE", f"{PATH}/{window_id}") for window_id in ids]
    if args.json:
        print_json(ended)
        return 0
    for window in ended:
        what = "removed" if window["status"] == "removed" else "ended"
        print(printable(f"#{window['id']} {window['target']}: {what}, bookable again"))
    return 0


def cmd_maintenance(args: argparse.Namespace) -> int:
    api = stored_api()
    found = api.get(
        PATH,
        start=None if args.start is None else args.start.isoformat(),
        end=None if args.end is None else args.end.isoformat(),
    )
    if args.json:
        print_json(found)
        return 0
    if not found:
        print("no maintenance window is on or coming")
    now = utc_now()
    for window in found:
        print(window_line(window, now))
    return 0


COMMANDS = {"maintenance": cmd_maintenance}


def add_host_parsers(actions: Any, common: list[argparse.ArgumentParser]) -> None:
    """`warden hosts drain|undrain`."""
    drain = actions.add_parser(
        "drain",
        parents=common,
        help="admins: drain a host or GPUs for maintenance (no bookings in the window)",
        description="New bookings of the drained GPUs in the window are refused with the "
        "reason; owners of bookings it overlaps are told at once, with an alternative. Their "
        "bookings are kept unless --bookings says otherwise. Running jobs are not stopped "
        "unless --stop-jobs says so.",
    )
    drain.add_argument("target", metavar="HOST|HOST:IDX", help="dgx1, dgx1:0 or dgx1:0,1")
    drain.add_argument("--reason", required=True, help="why (shown to everyone)")
    drain.add_argument(
        "--from", dest="start", type=time_arg, metavar="TIME", help="now (default), +1h, ISO"
    )
    drain.add_argument(
        "--until", dest="end", type=time_arg, metavar="TIME", help="default: until undrained"
    )
    drain.add_argument(
        "--bookings",
        choices=("keep", "cancel", "move"),
        default="keep",
        help="the overlapped bookings: keep (default), cancel, or move to the alternative",
    )
    drain.add_argument(
        "--stop-jobs",
        action="store_true",
        help="stop the jobs running on the drained GPUs when the window begins",
    )
    json_flag(drain)
    undrain = actions.add_parser(
        "undrain",
        parents=common,
        help="admins: end a maintenance window now (by id, or every one of HOST)",
    )
    undrain.add_argument("target", metavar="ID|HOST|HOST:IDX")
    json_flag(undrain)


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    listing = commands.add_parser(
        "maintenance",
        parents=common,
        help="maintenance windows: drained hosts and GPUs, now and coming",
    )
    listing.add_argument("--from", dest="start", type=time_arg, metavar="TIME")
    listing.add_argument("--to", dest="end", type=time_arg, metavar="TIME")
    json_flag(listing)
