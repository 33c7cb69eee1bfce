"""`warden jobs`, `warden submit`, `warden stop` and `warden logs`: jobs over the API."""

from __future__ import annotations

import argparse
import json
import sys
import tomllib
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from services.client.api import ClientError
from services.client.args import (
    Subcommands,
    UsageError,
    index_arg,
    json_flag,
    list_word,
    positive_int,
)
from services.client.output import PAGE, console, page_note, print_json, utc_now
from services.client.render import describe_job, jobs_table
from services.client.session import my_username, stored_api

DEFAULT_LOG_BYTES = 64 * 1024


def cmd_jobs(args: argparse.Namespace) -> int:
    api = stored_api()
    owner = my_username(api) if args.mine else None
    answer = api.get("/jobs", owner=owner, status=args.status, limit=PAGE)
    if args.json:
        print_json(answer)
        return 0
    items = answer.get("items") or []
    if not items:
        print("no jobs")
        return 0
    out = console()
    out.print(jobs_table(items, utc_now(), width=out.width))
    page_note(answer, "jobs")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    api = stored_api()
    answer = api.get(f"/jobs/{args.job}/tasks/{args.task}/logs", max_bytes=args.bytes)
    text = ""
    if isinstance(answer, Mapping):
        for key in ("log", "text", "tail", "logs"):
            if isinstance(answer.get(key), str):
                text = answer[key]
                break
    elif isinstance(answer, str):
        text = answer
    sys.stdout.write(text if not text or text.endswith("\n") else text + "\n")
    return 0


def load_definition(path: Path) -> dict[str, Any]:
    """A job definition from a JSON or TOML file (by its suffix; else JSON, then TOML)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UsageError(f"cannot read {path}: {err.strerror or err}") from None
    suffix = path.suffix.lower()
    parsers: list[tuple[str, Callable[[str], Any]]] = [
        ("JSON", json.loads),
        ("TOML", tomllib.loads),
    ]
    if suffix == ".toml":
        parsers.reverse()
    elif suffix == ".json":
        parsers = parsers[:1]
    problems = []
    for kind, parse in parsers:
        try:
            data = parse(text)
        except ValueError as err:
            problems.append(f"not {kind}: {err}")
            continue
        if not isinstance(data, dict):
            raise UsageError(f"{path}: a job definition is an object (a table in TOML)")
        return data
    raise UsageError(f"{path}: " + "; ".join(problems))


def cmd_submit(args: argparse.Namespace) -> int:
    definition = load_definition(Path(args.file))
    if args.queue:
        definition["queued"] = True
    api = stored_api()
    job = api.post("/jobs", definition)
    if args.start:
        try:
            job = api.post(f"/jobs/{job['id']}/start")
        except ClientError:
            print(f"created {describe_job(job)}; it did not start:", file=sys.stderr)
            raise
    if args.json:
        print_json(job)
    else:
        print(f"submitted {describe_job(job)}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    api = stored_api()
    job = api.post(f"/jobs/{args.job}/stop")
    if args.json:
        print_json(job)
    else:
        print(describe_job(job))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "jobs": cmd_jobs,
    "submit": cmd_submit,
    "stop": cmd_stop,
    "logs": cmd_logs,
}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    jobs = commands.add_parser("jobs", parents=common, help="jobs, newest first")
    list_word(jobs)
    jobs.add_argument("--mine", action="store_true", help="only yours")
    jobs.add_argument("--status", metavar="STATUS", help="e.g. running, queued, failed")
    json_flag(jobs)

    submit = commands.add_parser(
        "submit", parents=common, help="create a job from a JSON or TOML definition"
    )
    submit.add_argument("file", metavar="FILE", help="the job definition (.json or .toml)")
    when_group = submit.add_mutually_exclusive_group()
    when_group.add_argument("--start", action="store_true", help="start it now")
    when_group.add_argument("--queue", action="store_true", help="queue it until GPUs are free")
    json_flag(submit)

    stop = commands.add_parser("stop", parents=common, help="stop a job")
    stop.add_argument("job", type=positive_int, metavar="JOB", help="the job's id")
    json_flag(stop)

    logs = commands.add_parser("logs", parents=common, help="the end of a task's log")
    logs.add_argument("job", type=positive_int, metavar="JOB", help="the job's id")
    logs.add_argument("--task", type=index_arg, default=0, metavar="N", help="task (0)")
    logs.add_argument(
        "--bytes",
        type=positive_int,
        default=DEFAULT_LOG_BYTES,
        metavar="N",
        help=f"at most this much of the end ({DEFAULT_LOG_BYTES})",
    )
