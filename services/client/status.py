"""`warden status`: every GPU now, its use, processes and reservations (`GET /gpus`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from services.client.args import Subcommands, json_flag
from services.client.output import console, print_json, utc_now
from services.client.render import status_table
from services.client.session import stored_api


def cmd_status(args: argparse.Namespace) -> int:
    api = stored_api()
    answer = api.get("/gpus", host=args.host)
    if args.json:
        print_json(answer)
        return 0
    if not answer.get("gpus"):
        print(f"no GPUs known{f' on {args.host}' if args.host else ''} yet")
        return 0
    out = console()
    out.print(status_table(answer, utc_now(), width=out.width))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"status": cmd_status}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status", parents=common, help="every GPU now: use, processes, reservations"
    )
    status.add_argument("--host", metavar="HOST", help="only this host")
    json_flag(status)
