"""`warden violations`: GPUs used against reservations (`GET /violations`), and `warden
violations ID`: one incident with its timeline (`GET /violations/{id}`). An id is given whole
or by a prefix of at least 8 characters, as the table shows it."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator, Mapping, Sequence
from datetime import datetime, tzinfo
from typing import Any
from urllib.parse import quote

from services.client.api import Api
from services.client.args import Subcommands, json_flag
from services.client.ids import match_prefix
from services.client.output import PAGE, console, page_note, print_json, utc_now
from services.client.render import (
    NONE,
    incident_gpu,
    printable,
    processes_text,
    violations_table,
    when,
)
from services.client.session import stored_api

FULL_ID = 36  # a uuid: asked for directly, without a listing


def visible_ids(api: Api) -> Iterator[str]:
    """Every incident id the signed-in user may see, page by page."""
    offset = 0
    while True:
        answer = api.get("/violations", limit=PAGE, offset=offset)
        items = answer.get("items") or []
        yield from (str(item["id"]) for item in items)
        offset += len(items)
        if not items or offset >= int(answer.get("total") or 0):
            return


def incident_id(api: Api, ref: str) -> str:
    if len(ref) >= FULL_ID:
        return ref
    return match_prefix(ref, visible_ids(api), "violation")


def incident_lines(
    incident: Mapping[str, Any], now: datetime, tz: tzinfo | None = None
) -> list[str]:
    """One incident in words, then its timeline, oldest first (pure)."""
    lines = [
        f"violation {incident.get('id')}: {incident.get('status')} on {incident_gpu(incident)}",
        f"  offender: {incident.get('offender') or NONE}; "
        f"processes: {processes_text(incident.get('processes'))}",
    ]
    if incident.get("owner"):
        lines.append(
            f"  reserved by {incident['owner']} (reservation {incident.get('reservation_id')}, "
            f"{when(incident.get('reservation_start'), now, tz)} to "
            f"{when(incident.get('reservation_end'), now, tz)})"
        )
    lines.append(
        f"  opened {when(incident.get('opened_at'), now, tz)}, "
        f"last seen {when(incident.get('last_seen_at'), now, tz)}"
    )
    if incident.get("resolved_at"):
        reason = f" ({incident['resolve_reason']})" if incident.get("resolve_reason") else ""
        lines.append(f"  resolved {when(incident['resolved_at'], now, tz)}{reason}")
    lines.append(f"  steps: {', '.join(incident.get('steps') or ()) or NONE}")
    lines.append("timeline:")
    for entry in incident.get("timeline") or ():
        lines.append(f"  {when(entry.get('at'), now, tz)}  {_entry_text(entry)}")
    return [printable(line) for line in lines]


def _entry_text(entry: Mapping[str, Any]) -> str:
    text = str(entry.get("kind") or "?")
    if entry.get("step_index") is not None:
        text += f" step {entry['step_index']}"
    if entry.get("handler"):
        text += f" {entry['handler']}"
    if entry.get("target"):
        text += f" to {entry['target']}"
    if entry.get("ok") is not None:
        text += ": ok" if entry["ok"] else ": failed"
    if entry.get("detail"):
        text += f" ({entry['detail']})"
    return text


def cmd_violations(args: argparse.Namespace) -> int:
    api = stored_api()
    if args.id and args.id != "list":
        return show_incident(api, args)
    answer = api.get("/violations", status="open" if args.open else None, limit=PAGE)
    if args.json:
        print_json(answer)
        return 0
    items = answer.get("items") or []
    if not items:
        print("no open violations" if args.open else "no violations")
        return 0
    out = console()
    out.print(violations_table(items, utc_now(), width=out.width))
    page_note(answer, "violations")
    return 0


def show_incident(api: Api, args: argparse.Namespace) -> int:
    incident = api.get(f"/violations/{quote(incident_id(api, args.id), safe='')}")
    if args.json:
        print_json(incident)
    else:
        print(*incident_lines(incident, utc_now()), sep="\n")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"violations": cmd_violations}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    violations = commands.add_parser(
        "violations",
        parents=common,
        help="GPUs used against reservations; one of them with its timeline",
    )
    violations.add_argument(
        "id",
        nargs="?",
        metavar="ID",
        help="show this one: its id, or the first 8 or more characters of it",
    )
    violations.add_argument("--open", action="store_true", help="only the open ones")
    json_flag(violations)
