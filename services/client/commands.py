"""The `warden` commands for researchers, over the REST API: login, logout, status, reserve,
reservations, cancel, jobs, submit, stop, logs, violations.

Tables for people (rich), `--json` for scripts (the API's JSON as it came). The table
functions are pure: the API's JSON (and the time to count "today" from) in, a rich `Table`
out. Exit status: 0 done, 1 refused or failed (why on stderr), 2 usage.
"""

from __future__ import annotations

import argparse
import getpass
import json
import math
import os
import re
import sys
import tomllib
from collections.abc import Callable, Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta, tzinfo
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from services.client.api import Api, ApiError, ClientError
from services.client.store import Credentials, CredentialsError, CredentialStore, server_url

NONE = "\u2013"  # an en dash: a figure the host did not report (never shown as 0)
DEFAULT_TITLE = "reserved from the CLI"
DEFAULT_RANGE = timedelta(days=7)
PAGE = 500  # the API's largest page
DEFAULT_LOG_BYTES = 64 * 1024


class UsageError(Exception):
    """The command line is wrong in a way argparse cannot tell (exit status 2)."""


# --- times and durations ------------------------------------------------------------------------

_DURATION_PART = re.compile(r"(\d+)([wdhm])")
_UNIT_MINUTES = {"w": 7 * 24 * 60, "d": 24 * 60, "h": 60, "m": 1}
_CLOCK = re.compile(r"(\d{1,2}):(\d{2})")


def parse_duration(text: str) -> timedelta:
    """`90m`, `2h`, `1d`, `1w`, `1h30m`, or plain minutes (`45`); at least a minute."""
    compact = text.strip().lower().replace(" ", "")
    if compact.isdigit():
        minutes = int(compact)
    else:
        parts = _DURATION_PART.findall(compact)
        if not parts or "".join(n + u for n, u in parts) != compact:
            raise ValueError(f"not a duration: {text!r} (write 90m, 2h, 1d, 1h30m)")
        minutes = sum(int(number) * _UNIT_MINUTES[unit] for number, unit in parts)
    if minutes < 1:
        raise ValueError(f"a duration of at least a minute, not {text!r}")
    return timedelta(minutes=minutes)


def parse_time(text: str, now: datetime, tz: tzinfo | None = None) -> datetime:
    """`now`, `+30m` (from now), `HH:MM` (today, local time) or ISO 8601 (local time unless it
    names a zone): an aware datetime. `tz`: the local zone (default: the system's)."""
    value = text.strip()
    if value.lower() == "now":
        return now
    if value.startswith("+"):
        return now + parse_duration(value[1:])
    local_now = now.astimezone(tz)
    clock = _CLOCK.fullmatch(value)
    if clock:
        hour, minute = int(clock[1]), int(clock[2])
        if hour > 23 or minute > 59:
            raise ValueError(f"not a time of day: {text!r}")
        return local_now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(
            f"not a time: {text!r} (write now, +30m, 14:30 or 2026-05-04T14:30)"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=tz) if tz is not None else parsed.astimezone()
    return parsed


def whole_minutes(span: timedelta) -> int:
    return max(1, math.ceil(span.total_seconds() / 60))


def _time_arg(text: str) -> datetime:
    try:
        return parse_time(text, datetime.now(UTC))
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _duration_arg(text: str) -> timedelta:
    try:
        return parse_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"at least 1, not {value}")
    return value


def _index_arg(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"at least 0, not {value}")
    return value


def when(value: str | None, now: datetime, tz: tzinfo | None = None) -> str:
    """An API time in local time: `HH:MM` today, `YYYY-MM-DD HH:MM` another day."""
    if not value:
        return NONE
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    local, today = moment.astimezone(tz), now.astimezone(tz).date()
    return local.strftime("%H:%M") if local.date() == today else local.strftime("%Y-%m-%d %H:%M")


def expand_gpus(refs: Iterable[str]) -> list[str]:
    """`dgx1:0,1` → `dgx1:0`, `dgx1:1`; a uuid or `host:index` as it is."""
    found: list[str] = []
    for ref in refs:
        host, sep, indexes = ref.rpartition(":")
        if sep and host and re.fullmatch(r"\d+(,\d+)+", indexes):
            found += [f"{host}:{index}" for index in indexes.split(",")]
        else:
            found.append(ref)
    return found


# --- rendering (pure) ---------------------------------------------------------------------------


def _figure(value: Any, unit: str = "", digits: int = 0) -> str:
    if value is None or isinstance(value, bool):
        return NONE
    try:
        number = float(value)
    except (TypeError, ValueError):
        return NONE
    return f"{number:.{digits}f}{unit}"


def memory_text(used_mib: Any, total_mib: Any) -> str:
    if used_mib is None and total_mib is None:
        return NONE
    used = _figure(None if used_mib is None else float(used_mib) / 1024, digits=1)
    total = _figure(None if total_mib is None else float(total_mib) / 1024, digits=1)
    return f"{used}/{total} GiB"


def processes_text(processes: Iterable[Mapping[str, Any]] | None) -> str:
    shown = [f"{p.get('user') or '?'}({p.get('pid', '?')})" for p in processes or ()]
    return ", ".join(shown) if shown else NONE


def gpu_place(gpu: Mapping[str, Any]) -> str:
    """`host:index`, or the uuid of a GPU without an index."""
    index = gpu.get("index")
    if index is None:
        return str(gpu.get("uuid") or "?")
    return f"{gpu.get('host', '?')}:{index}"


def current_text(reservation: Mapping[str, Any] | None, now: datetime, tz: tzinfo | None) -> str:
    if not reservation:
        return NONE
    return f"{reservation.get('owner', '?')} until {when(reservation.get('end'), now, tz)}"


def next_text(reservation: Mapping[str, Any] | None, now: datetime, tz: tzinfo | None) -> str:
    if not reservation:
        return NONE
    return f"{reservation.get('owner', '?')} from {when(reservation.get('start'), now, tz)}"


def _by_place(gpu: Mapping[str, Any]) -> tuple[str, int, str]:
    index = gpu.get("index")
    return (
        str(gpu.get("host", "")),
        index if isinstance(index, int) else 1 << 30,
        str(gpu.get("uuid", "")),
    )


STATUS_COLUMNS = ("HOST", "GPU", "MODEL", "UTIL", "MEMORY", "PROCESSES", "RESERVED", "NEXT")


def status_rows(
    payload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    """One row per GPU of `GET /gpus`: unreported figures are a dash, never 0."""
    rows = []
    for gpu in sorted(payload.get("gpus") or (), key=_by_place):
        reachable = gpu.get("reachable")
        host = str(gpu.get("host", "?"))
        if reachable is False:
            host += " (unreachable)"
        index = gpu.get("index")
        rows.append(
            [
                host,
                NONE if index is None else str(index),
                str(gpu.get("name") or NONE),
                _figure(gpu.get("utilization_gpu_percent"), "%"),
                memory_text(gpu.get("memory_used_mib"), gpu.get("memory_total_mib")),
                processes_text(gpu.get("processes")),
                current_text(gpu.get("reservation"), now, tz),
                next_text(gpu.get("next_reservation"), now, tz),
            ]
        )
    return rows


RESERVATION_COLUMNS = ("ID", "OWNER", "GPUS", "START", "END", "STATUS", "TITLE")


def reservation_rows(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    return [
        [
            str(r.get("id", "?")),
            str(r.get("owner", "?")),
            ", ".join(gpu_place(g) for g in r.get("gpus") or ()) or NONE,
            when(r.get("start"), now, tz),
            when(r.get("end"), now, tz),
            str(r.get("status") or NONE),
            str(r.get("title") or ""),
        ]
        for r in items
    ]


JOB_COLUMNS = ("ID", "OWNER", "NAME", "STATUS", "TASKS", "CREATED", "NOTE")


def task_text(task: Mapping[str, Any]) -> str:
    gpus = task.get("gpus") or []
    count = len(gpus) or task.get("gpu_count") or 0
    where = str(task.get("host") or "any host")
    text = f"{task.get('index', '?')}: {where}, {count} GPU{'s' if count != 1 else ''}"
    text += f", {task.get('status') or '?'}"
    if task.get("exit_code") is not None:
        text += f" (exit {task['exit_code']})"
    return text


def job_rows(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    rows = []
    for job in items:
        status = str(job.get("status") or NONE)
        if job.get("queued") and status != "queued":
            status += " (queue)"
        rows.append(
            [
                str(job.get("id", "?")),
                str(job.get("owner", "?")),
                str(job.get("name") or ""),
                status,
                "\n".join(task_text(t) for t in job.get("tasks") or ()) or NONE,
                when(job.get("created_at"), now, tz),
                str(job.get("waiting_reason") or job.get("stop_reason") or ""),
            ]
        )
    return rows


VIOLATION_COLUMNS = (
    "ID",
    "STATUS",
    "GPU",
    "OFFENDER",
    "PROCESSES",
    "RESERVED BY",
    "OPENED",
    "RESOLVED",
)


def violation_rows(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    rows = []
    for incident in items:
        resolved = NONE
        if incident.get("resolved_at"):
            resolved = when(incident.get("resolved_at"), now, tz)
            if incident.get("resolve_reason"):
                resolved += f" ({incident['resolve_reason']})"
        rows.append(
            [
                str(incident.get("id", "?")),
                str(incident.get("status") or NONE),
                gpu_place(
                    {
                        "host": incident.get("host"),
                        "index": incident.get("gpu_index"),
                        "uuid": incident.get("gpu_uuid"),
                    }
                ),
                str(incident.get("offender") or NONE),
                processes_text(incident.get("processes")),
                str(incident.get("owner") or NONE),
                when(incident.get("opened_at"), now, tz),
                resolved,
            ]
        )
    return rows


def make_table(columns: Sequence[str], rows: Iterable[Sequence[str]], title: str = "") -> Table:
    """Cells as plain text: names and titles from the API are never read as rich markup."""
    table = Table(title=title or None, title_justify="left", header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(Text(cell) for cell in row))
    return table


def status_table(payload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> Table:
    return make_table(STATUS_COLUMNS, status_rows(payload, now, tz))


def reservations_table(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None, title: str = ""
) -> Table:
    return make_table(RESERVATION_COLUMNS, reservation_rows(items, now, tz), title)


def jobs_table(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> Table:
    return make_table(JOB_COLUMNS, job_rows(items, now, tz))


def violations_table(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> Table:
    return make_table(VIOLATION_COLUMNS, violation_rows(items, now, tz))


def describe_reservation(r: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> str:
    gpus = ", ".join(gpu_place(g) for g in r.get("gpus") or ())
    return (
        f"reservation {r.get('id', '?')}: {gpus} from {when(r.get('start'), now, tz)} "
        f"to {when(r.get('end'), now, tz)} ({r.get('title', '')})"
    )


def describe_job(job: Mapping[str, Any]) -> str:
    text = f"job {job.get('id', '?')} ({job.get('name', '')}): {job.get('status', '?')}"
    if job.get("waiting_reason"):
        text += f" ({job['waiting_reason']})"
    return text


# --- output -----------------------------------------------------------------------------------


def _console() -> Console:
    """Stdout as it is now; wide when it is not a terminal so that pipes do not wrap rows."""
    tty = sys.stdout.isatty()
    return Console(file=sys.stdout, width=None if tty else 200, highlight=False)


def _print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, ensure_ascii=False))


def _now() -> datetime:
    return datetime.now(UTC)


def _page_note(answer: Mapping[str, Any], what: str) -> None:
    shown, total = len(answer.get("items") or ()), answer.get("total")
    if isinstance(total, int) and total > shown:
        print(f"(the first {shown} of {total} {what})")


# --- the session --------------------------------------------------------------------------------


def _store() -> CredentialStore:
    return CredentialStore()


def _server(stored: Credentials | None) -> str:
    try:
        return server_url(stored)
    except ValueError as err:  # a bad $WARDEN_SERVER (what login stores is checked)
        raise ClientError(f"WARDEN_SERVER: {err}") from None


def _api() -> Api:
    """A client for the stored login (and $WARDEN_SERVER, when set)."""
    store = _store()
    stored = store.load()
    return Api(_server(stored), credentials=stored, store=store)


def _me(api: Api) -> str:
    if api.credentials is not None and api.credentials.username:
        return api.credentials.username
    answer = api.get("/me")
    return str(answer["user"]["username"])


def cmd_login(args: argparse.Namespace) -> int:
    store = _store()
    try:
        stored = store.load()
    except CredentialsError:
        stored = None  # replaced by this login
    try:
        server = server_url(stored, args.server)
    except ValueError as err:
        raise UsageError(str(err)) from None
    username = args.user or os.environ.get("USER") or _local_username()
    if not username:
        raise UsageError("cannot tell your username: give --user NAME")
    password = os.environ.get("WARDEN_PASSWORD")
    if password is None:
        if not sys.stdin.isatty():
            raise ClientError("set WARDEN_PASSWORD or run on a terminal (to be asked the password)")
        password = getpass.getpass(f"password of {username} at {server}: ")
    api = Api(server, store=store)
    user = api.login(username, password)
    roles = ", ".join(user.get("roles") or ())
    name = user.get("username", username)
    print(f"signed in to {server} as {name}" + (f" ({roles})" if roles else ""))
    print(f"credentials stored in {store.path}")
    return 0


def _local_username() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return None


def cmd_logout(_args: argparse.Namespace) -> int:
    store = _store()
    try:
        stored = store.load()
    except CredentialsError:
        stored = None
    if stored is None or not stored.signed_in:
        store.delete()
        print("not signed in")
        return 0
    api = Api(_server(stored), credentials=stored, store=store)
    problem: ClientError | None = None
    try:
        api.logout()
    except ClientError as err:
        problem = err
    store.delete()
    if problem is not None:
        print(
            f"warden: could not revoke the session on the server: {problem.message}\n"
            f"(the local credentials are deleted; the session ends when it expires)",
            file=sys.stderr,
        )
        return 1
    print(f"signed out of {api.server}")
    return 0


# --- reading ------------------------------------------------------------------------------------


def cmd_status(args: argparse.Namespace) -> int:
    api = _api()
    answer = api.get("/gpus", host=args.host)
    if args.json:
        _print_json(answer)
        return 0
    if not answer.get("gpus"):
        print(f"no GPUs known{f' on {args.host}' if args.host else ''} yet")
        return 0
    _console().print(status_table(answer, _now()))
    return 0


def cmd_reservations(args: argparse.Namespace) -> int:
    api = _api()
    now = _now()
    start: datetime = args.start or now
    end: datetime = args.end or start + DEFAULT_RANGE
    if end <= start:
        raise UsageError("--to must be after --from")
    owner = None if args.all_users else _me(api)
    answer = api.get(
        "/reservations",
        start=start.isoformat(),
        end=end.isoformat(),
        owner=owner,
        limit=PAGE,
    )
    if args.json:
        _print_json(answer)
        return 0
    items = answer.get("items") or []
    span = f"from {when(start.isoformat(), now)} to {when(end.isoformat(), now)}"
    whose = "" if owner is None else f" of {owner}"
    if not items:
        print(f"no reservations{whose} {span}")
        return 0
    _console().print(reservations_table(items, now, title=f"reservations{whose} {span}"))
    _page_note(answer, "reservations")
    return 0


def cmd_jobs(args: argparse.Namespace) -> int:
    api = _api()
    owner = _me(api) if args.mine else None
    answer = api.get("/jobs", owner=owner, status=args.status, limit=PAGE)
    if args.json:
        _print_json(answer)
        return 0
    items = answer.get("items") or []
    if not items:
        print("no jobs")
        return 0
    _console().print(jobs_table(items, _now()))
    _page_note(answer, "jobs")
    return 0


def cmd_logs(args: argparse.Namespace) -> int:
    api = _api()
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


def cmd_violations(args: argparse.Namespace) -> int:
    api = _api()
    answer = api.get("/violations", status="open" if args.open else None, limit=PAGE)
    if args.json:
        _print_json(answer)
        return 0
    items = answer.get("items") or []
    if not items:
        print("no open violations" if args.open else "no violations")
        return 0
    _console().print(violations_table(items, _now()))
    _page_note(answer, "violations")
    return 0


# --- changing -----------------------------------------------------------------------------------


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
    if (args.host or args.same_host) and not args.count:
        raise UsageError("--host and --same-host go with --count")
    now = _now()
    body = reservation_request(args, now)
    api = _api()
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
        _print_json(created)
    else:
        print(f"reserved: {describe_reservation(created, now)}")
    return 0


def _has_started(reservation: Mapping[str, Any], now: datetime) -> bool:
    try:
        start = datetime.fromisoformat(str(reservation.get("start")))
    except ValueError:
        return False
    return reservation.get("status") == "active" and start <= now


def cmd_cancel(args: argparse.Namespace) -> int:
    """Cancel; a reservation that has started (which only admins may cancel) ends now."""
    api = _api()
    now = _now()
    try:
        done = api.delete(f"/reservations/{args.id}", reason=args.reason or None)
        verb = "cancelled"
    except ApiError as err:
        if err.status != 403 or not _has_started(api.get(f"/reservations/{args.id}"), now):
            raise
        done = api.post(f"/reservations/{args.id}/end")
        verb = "it had started: ended"
    if args.json:
        _print_json(done)
    else:
        print(f"{verb} {describe_reservation(done, now)}")
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
    api = _api()
    job = api.post("/jobs", definition)
    if args.start:
        try:
            job = api.post(f"/jobs/{job['id']}/start")
        except ClientError:
            print(f"created {describe_job(job)}; it did not start:", file=sys.stderr)
            raise
    if args.json:
        _print_json(job)
    else:
        print(f"submitted {describe_job(job)}")
    return 0


def cmd_stop(args: argparse.Namespace) -> int:
    api = _api()
    job = api.post(f"/jobs/{args.job}/stop")
    if args.json:
        _print_json(job)
    else:
        print(describe_job(job))
    return 0


# --- the command line ---------------------------------------------------------------------------


def _guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Errors as one message (and reasons) on stderr: 1 refused or failed, 2 usage."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except UsageError as err:
            print(f"warden {args.command}: {err}", file=sys.stderr)
            return 2
        except ClientError as err:
            lines = err.lines()
            print(f"warden: {lines[0]}", *lines[1:], sep="\n", file=sys.stderr)
            return 1
        except CredentialsError as err:
            print(f"warden: {err} (`warden login` writes it again)", file=sys.stderr)
            return 1

    run.__name__ = command.__name__
    return run


CLIENT_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: _guarded(function)
    for name, function in {
        "login": cmd_login,
        "logout": cmd_logout,
        "status": cmd_status,
        "reserve": cmd_reserve,
        "reservations": cmd_reservations,
        "cancel": cmd_cancel,
        "jobs": cmd_jobs,
        "submit": cmd_submit,
        "stop": cmd_stop,
        "logs": cmd_logs,
        "violations": cmd_violations,
    }.items()
}
"""What `services.cli.main` runs for each client command."""


def _json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print the API's JSON")


def add_client_commands(
    commands: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> None:
    """The client commands, on `warden`'s subcommands."""
    common = list(parents)

    login = commands.add_parser(
        "login",
        parents=common,
        help="sign in to a Warden server and keep the session "
        "(password: $WARDEN_PASSWORD, else asked)",
    )
    login.add_argument(
        "--server",
        metavar="URL",
        help="e.g. http://warden.lab:8080 (default: $WARDEN_SERVER, "
        "else the last one, else http://127.0.0.1:8080)",
    )
    login.add_argument("--user", metavar="NAME", help="your username (default: $USER)")

    commands.add_parser("logout", parents=common, help="sign out and delete the stored session")

    status = commands.add_parser(
        "status", parents=common, help="every GPU now: use, processes, reservations"
    )
    status.add_argument("--host", metavar="HOST", help="only this host")
    _json_flag(status)

    reserve = commands.add_parser(
        "reserve", parents=common, help="reserve GPUs by name, or any N free ones"
    )
    reserve.add_argument(
        "gpus", nargs="*", metavar="GPU", help="host:index (dgx1:0, or dgx1:0,1) or a GPU uuid"
    )
    reserve.add_argument(
        "--count", type=_positive_int, metavar="N", help="any N GPUs: the earliest free slot"
    )
    reserve.add_argument("--host", metavar="HOST", help="with --count: on this host")
    reserve.add_argument("--same-host", action="store_true", help="with --count: all on one host")
    reserve.add_argument(
        "--start", type=_time_arg, metavar="TIME", help="now (default), +30m, 14:30 or ISO 8601"
    )
    until = reserve.add_mutually_exclusive_group(required=True)
    until.add_argument("--end", type=_time_arg, metavar="TIME", help="+2h, 18:00 or ISO 8601")
    until.add_argument("--duration", type=_duration_arg, metavar="SPAN", help="90m, 2h, 1d, 1h30m")
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
    _json_flag(reserve)

    listing = commands.add_parser(
        "reservations", parents=common, help="reservations in a time range"
    )
    whose = listing.add_mutually_exclusive_group()
    whose.add_argument("--mine", action="store_true", help="only yours (the default)")
    whose.add_argument("--all-users", action="store_true", help="everyone's")
    listing.add_argument(
        "--from", dest="start", type=_time_arg, metavar="TIME", help="default: now"
    )
    listing.add_argument(
        "--to", dest="end", type=_time_arg, metavar="TIME", help="default: 7 days after --from"
    )
    _json_flag(listing)

    cancel = commands.add_parser(
        "cancel", parents=common, help="cancel a reservation (one that has started ends now)"
    )
    cancel.add_argument("id", type=_positive_int, metavar="ID", help="the reservation's id")
    cancel.add_argument("--reason", metavar="TEXT", help="why (shown to whoever looks)")
    _json_flag(cancel)

    jobs = commands.add_parser("jobs", parents=common, help="jobs, newest first")
    jobs.add_argument("--mine", action="store_true", help="only yours")
    jobs.add_argument("--status", metavar="STATUS", help="e.g. running, queued, failed")
    _json_flag(jobs)

    submit = commands.add_parser(
        "submit", parents=common, help="create a job from a JSON or TOML definition"
    )
    submit.add_argument("file", metavar="FILE", help="the job definition (.json or .toml)")
    when_group = submit.add_mutually_exclusive_group()
    when_group.add_argument("--start", action="store_true", help="start it now")
    when_group.add_argument("--queue", action="store_true", help="queue it until GPUs are free")
    _json_flag(submit)

    stop = commands.add_parser("stop", parents=common, help="stop a job")
    stop.add_argument("job", type=_positive_int, metavar="JOB", help="the job's id")
    _json_flag(stop)

    logs = commands.add_parser("logs", parents=common, help="the end of a task's log")
    logs.add_argument("job", type=_positive_int, metavar="JOB", help="the job's id")
    logs.add_argument("--task", type=_index_arg, default=0, metavar="N", help="task (0)")
    logs.add_argument(
        "--bytes",
        type=_positive_int,
        default=DEFAULT_LOG_BYTES,
        metavar="N",
        help=f"at most this much of the end ({DEFAULT_LOG_BYTES})",
    )

    violations = commands.add_parser(
        "violations", parents=common, help="GPUs used against reservations"
    )
    violations.add_argument("--open", action="store_true", help="only the open ones")
    _json_flag(violations)
