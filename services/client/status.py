"""`warden status`: every GPU now, its use, processes and reservations (`GET /gpus`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rich.table import Table

from services.client.args import Subcommands, json_flag
from services.client.columns import Column, fitted_table
from services.client.output import console, print_json, utc_now
from services.client.render import NONE, WIDE, gpu_place, model_text, status_table
from services.client.session import stored_api


def cmd_status(args: argparse.Namespace) -> int:
    api = stored_api()
    answer = api.get("/gpus", host=args.host)
    if args.labels:
        answer["gpus"] = [g for g in answer.get("gpus") or () if _carries(g, args.labels)]
    if args.json:
        print_json(answer)
        return 0
    if not answer.get("gpus"):
        labelled = f" labelled {', '.join(args.labels)}" if args.labels else ""
        print(f"no GPUs{labelled} known{f' on {args.host}' if args.host else ''} yet")
        return 0
    out = console()
    if args.show_labels:
        out.print(labels_table(answer, width=out.width))
        return 0
    out.print(status_table(answer, utc_now(), width=out.width))
    return 0


LABEL_COLUMNS = (Column("GPU"), Column("MODEL", 6), Column("LABELS", 12))


def labels_table(payload: Mapping[str, Any], width: int = WIDE) -> Table:
    """One row per GPU of `GET /gpus`: where, its model, its labels from the hardware."""
    rows = [
        [gpu_place(gpu), model_text(gpu.get("name")), " ".join(gpu.get("labels") or ()) or NONE]
        for gpu in sorted(payload.get("gpus") or (), key=_place_key)
    ]
    return fitted_table(LABEL_COLUMNS, rows, width)


def _place_key(gpu: Mapping[str, Any]) -> tuple[str, int]:
    index = gpu.get("index")
    return str(gpu.get("host", "")), index if isinstance(index, int) else 1 << 30


def _carries(gpu: Mapping[str, Any], terms: Sequence[str]) -> bool:
    """The GPU's labels meet every term: key=value (carried) or key!=value (not carried)."""
    carried = {str(label).lower() for label in gpu.get("labels") or ()}
    for term in terms:
        negated = "!=" in term
        label = term.replace("!=", "=", 1).lower()
        if (label in carried) == negated:
            return False
    return True


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"status": cmd_status}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    status = commands.add_parser(
        "status", parents=common, help="every GPU now: use, processes, reservations"
    )
    status.add_argument("--host", metavar="HOST", help="only this host")
    status.add_argument(
        "--label",
        dest="labels",
        action="append",
        default=[],
        metavar="LABEL",
        help="only GPUs carrying it: model=H200, arch=ampere, memory=80GB, arch!=volta "
        "(repeatable: all must match)",
    )
    status.add_argument(
        "--labels",
        dest="show_labels",
        action="store_true",
        help="each GPU's labels from the hardware instead of its use",
    )
    json_flag(status)
