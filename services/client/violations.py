"""`warden violations`: GPUs used against reservations (`GET /violations`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence

from services.client.args import Subcommands, json_flag
from services.client.output import PAGE, console, page_note, print_json, utc_now
from services.client.render import violations_table
from services.client.session import stored_api


def cmd_violations(args: argparse.Namespace) -> int:
    api = stored_api()
    answer = api.get("/violations", status="open" if args.open else None, limit=PAGE)
    if args.json:
        print_json(answer)
        return 0
    items = answer.get("items") or []
    if not items:
        print("no open violations" if args.open else "no violations")
        return 0
    console().print(violations_table(items, utc_now()))
    page_note(answer, "violations")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"violations": cmd_violations}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    violations = commands.add_parser(
        "violations", parents=common, help="GPUs used against reservations"
    )
    violations.add_argument("--open", action="store_true", help="only the open ones")
    json_flag(violations)
