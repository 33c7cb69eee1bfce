"""The client's tables and one-line descriptions (pure): the API's JSON (and the time to count
"today" from) in, a rich `Table` or a line of text out. A figure the API does not report is a
dash, never 0; names and titles from the API are never read as rich markup, and never reach
the terminal with a control character in them (`printable`): another user's title could
otherwise clear your screen and print rows that are not there.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, tzinfo
from typing import Any

from rich.console import RenderableType
from rich.table import Table

from services.client.columns import Cell, Column, fitted_table, printable, titled
from services.client.ids import short_ids

NONE = "\u2013"  # an en dash: a figure the host did not report (never shown as 0)
WIDE = 200  # the width of a table not told the terminal's


def when(value: str | None, now: datetime, tz: tzinfo | None = None) -> str:
    """An API time in local time, as short as it can be said: `HH:MM` today, `Sun 09:00`
    within six days of it, `Mar 11 09:00` another day of this year, `YYYY-MM-DD HH:MM`."""
    if not value:
        return NONE
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        return value
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    local, today = moment.astimezone(tz), now.astimezone(tz).date()
    if local.date() == today:
        return local.strftime("%H:%M")
    if abs((local.date() - today).days) < 7:
        return local.strftime("%a %H:%M")
    return local.strftime("%b %d %H:%M" if local.year == today.year else "%Y-%m-%d %H:%M")


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


COMMAND_WIDTH = 32  # a table cell, not the whole command line (`--json` has it all)


def short_command(command: Any) -> str:
    """The program's and its script's file names, then the arguments, clipped:
    `/usr/bin/python3 /home/bob/x/train.py --lr 0.1` is `python3 train.py --lr 0.1`."""
    words = str(command or "").split()
    if not words:
        return ""
    script = next((i for i, w in enumerate(words[1:], 1) if not w.startswith("-")), None)
    for i in (0, script):
        if i is not None:
            words[i] = words[i].rstrip("/").rsplit("/", 1)[-1] or words[i]
    text = " ".join(words)
    return text if len(text) <= COMMAND_WIDTH else text[: COMMAND_WIDTH - 1] + "\u2026"


def process_text(process: Mapping[str, Any]) -> str:
    """`user:command(pid)`, leaving out what the API does not know (a process's user is null
    when ps did not see it; an incident's processes carry no user, the offender is its own
    column)."""
    known = [str(process.get("user") or ""), short_command(process.get("command"))]
    name = ":".join(part for part in known if part)
    return f"{name}({process.get('pid', '?')})" if name else f"pid {process.get('pid', '?')}"


def processes_text(processes: Iterable[Mapping[str, Any]] | None) -> str:
    shown = [process_text(p) for p in processes or ()]
    return ", ".join(shown) if shown else NONE


MIG_INDEX_BASE = 1000  # a MIG instance's index: 1000 x (its GPU's index + 1) + its MIG Dev


def gpu_place(gpu: Mapping[str, Any]) -> str:
    """`host:index` (`host:0/mig1` for a MIG instance), or the uuid of a GPU without an index."""
    index = gpu.get("index")
    if index is None:
        return str(gpu.get("uuid") or "?")
    if isinstance(index, int) and index >= MIG_INDEX_BASE:
        return f"{gpu.get('host', '?')}:{index // MIG_INDEX_BASE - 1}/mig{index % MIG_INDEX_BASE}"
    return f"{gpu.get('host', '?')}:{index}"


def current_text(reservation: Mapping[str, Any] | None, now: datetime, tz: tzinfo | None) -> str:
    if not reservation:
        return NONE
    return f"{reservation.get('owner', '?')} till {when(reservation.get('end'), now, tz)}"


def next_text(reservation: Mapping[str, Any] | None, now: datetime, tz: tzinfo | None) -> str:
    if not reservation:
        return NONE
    return f"{reservation.get('owner', '?')} {when(reservation.get('start'), now, tz)}"


def model_text(name: Any) -> str:
    """The model without the vendor every GPU here shares: `A100-SXM4-80GB`."""
    if not name:
        return NONE
    text = str(name)
    return text.removeprefix("NVIDIA ") or text


def _by_place(gpu: Mapping[str, Any]) -> tuple[str, int, int, str]:
    """Host, then index; a MIG instance right after the GPU it is part of."""
    index = gpu.get("index")
    place, part = (index, 0) if isinstance(index, int) else (1 << 30, 0)
    if isinstance(index, int) and index >= MIG_INDEX_BASE:
        place, part = index // MIG_INDEX_BASE - 1, index % MIG_INDEX_BASE + 1
    return (str(gpu.get("host", "")), place, part, str(gpu.get("uuid", "")))


# The columns that may be cut (with their floors) give way when a row is wider than the terminal.
STATUS_COLUMNS = (
    Column("GPU"),
    Column("MODEL", 6),
    Column("UTIL", justify="right"),
    Column("MEMORY", justify="right"),
    Column("PROCESSES", 12),
    Column("RESERVED", 10),
    Column("NEXT", 10),
)


def status_rows(
    payload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    """One row per GPU of `GET /gpus`: unreported figures are a dash, never 0; a GPU that
    is not healthy says so first (FAILED: out of the pool; degraded), with why."""
    rows = []
    for gpu in sorted(payload.get("gpus") or (), key=_by_place):
        processes = processes_text(gpu.get("processes"))
        if gpu.get("reachable") is False:
            processes = "host unreachable" + ("" if processes == NONE else f": {processes}")
        health = gpu.get("health") or {}
        if health.get("state") in ("failed", "degraded"):
            state = "FAILED" if health["state"] == "failed" else "degraded"
            said = f"{state} ({health.get('reason') or 'no reason given'})"
            processes = said + ("" if processes == NONE else f"; {processes}")
        rows.append(
            [
                gpu_place(gpu),
                model_text(gpu.get("name")),
                _figure(gpu.get("utilization_gpu_percent"), "%"),
                memory_text(gpu.get("memory_used_mib"), gpu.get("memory_total_mib")),
                processes,
                current_text(gpu.get("reservation"), now, tz),
                next_text(gpu.get("next_reservation"), now, tz),
            ]
        )
    return rows


RESERVATION_COLUMNS = (
    Column("ID", justify="right"),
    Column("OWNER"),
    Column("GPUS", 10),
    Column("START"),
    Column("END"),
    Column("STATUS"),
    Column("TITLE", 8),
)


def reservation_state(reservation: Mapping[str, Any], now: datetime) -> str:
    """As the web UI says it: upcoming, running, ended or cancelled (the API's `active` is
    a booking that has not ended, started or not)."""
    status = str(reservation.get("status") or NONE)
    if status != "active":
        return status
    try:
        start = datetime.fromisoformat(str(reservation.get("start")))
        end = datetime.fromisoformat(str(reservation.get("end")))
    except ValueError:
        return status
    if end <= now:
        return "ended"
    return "running" if start <= now else "upcoming"


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
            reservation_state(r, now),
            str(r.get("title") or ""),
        ]
        for r in items
    ]


JOB_COLUMNS = (
    Column("ID", justify="right"),
    Column("OWNER"),
    Column("NAME", 8),
    Column("STATUS"),
    Column("TASKS", 12),
    Column("CREATED"),
    Column("NOTE", 10),
    Column("STARTS"),
)


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
) -> list[list[Cell]]:
    """One row per job, its tasks one line each."""
    rows: list[list[Cell]] = []
    for job in items:
        status = str(job.get("status") or NONE)
        if job.get("queued") and status != "queued":
            status += " (queue)"
        tasks = tuple(task_text(t) for t in job.get("tasks") or ())
        rows.append(
            [
                str(job.get("id", "?")),
                str(job.get("owner", "?")),
                str(job.get("name") or ""),
                status,
                tasks or NONE,
                when(job.get("created_at"), now, tz),
                str(job.get("waiting_reason") or job.get("stop_reason") or ""),
                predicted_start(job, now, tz),
            ]
        )
    return rows


def predicted_start(job: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> str:
    """A queued job's predicted start; "> horizon" when none within the forecast's."""
    if job.get("status") != "queued" or "predicted_start" not in job:
        return ""
    return when(job["predicted_start"], now, tz) if job["predicted_start"] else "> horizon"


VIOLATION_COLUMNS = (
    Column("ID"),
    Column("STATUS"),
    Column("GPU"),
    Column("OFFENDER", 8),
    Column("PROCESSES", 12),
    Column("RESERVED BY", 8),
    Column("OPENED"),
    Column("RESOLVED", 10),
)


def violation_rows(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None
) -> list[list[str]]:
    """One row per incident, its id as short as it can be while unique among them (any
    command takes it)."""
    items = list(items)
    short = short_ids(str(incident.get("id", "?")) for incident in items)
    rows = []
    for incident in items:
        resolved = NONE
        if incident.get("resolved_at"):
            resolved = when(incident.get("resolved_at"), now, tz)
            if incident.get("resolve_reason"):
                resolved += f" ({incident['resolve_reason']})"
        rows.append(
            [
                short[str(incident.get("id", "?"))],
                str(incident.get("status") or NONE),
                incident_gpu(incident),
                str(incident.get("offender") or NONE),
                processes_text(incident.get("processes")),
                str(incident.get("owner") or NONE),
                when(incident.get("opened_at"), now, tz),
                resolved,
            ]
        )
    return rows


def incident_gpu(incident: Mapping[str, Any]) -> str:
    return gpu_place(
        {
            "host": incident.get("host"),
            "index": incident.get("gpu_index"),
            "uuid": incident.get("gpu_uuid"),
        }
    )


def make_table(
    columns: Sequence[Column], rows: Iterable[Sequence[Cell]], title: str = "", width: int = WIDE
) -> RenderableType:
    """Cells as plain text (names and titles from the API are never read as rich markup), one
    line per row within `width`, under `title` if there is one."""
    table = fitted_table(columns, rows, width)
    return titled(title, table, width) if title else table


def status_table(
    payload: Mapping[str, Any], now: datetime, tz: tzinfo | None = None, width: int = WIDE
) -> Table:
    return fitted_table(STATUS_COLUMNS, status_rows(payload, now, tz), width)


def reservations_table(
    items: Iterable[Mapping[str, Any]],
    now: datetime,
    tz: tzinfo | None = None,
    title: str = "",
    width: int = WIDE,
) -> RenderableType:
    return make_table(RESERVATION_COLUMNS, reservation_rows(items, now, tz), title, width)


def jobs_table(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None, width: int = WIDE
) -> Table:
    return fitted_table(JOB_COLUMNS, job_rows(items, now, tz), width)


def violations_table(
    items: Iterable[Mapping[str, Any]], now: datetime, tz: tzinfo | None = None, width: int = WIDE
) -> Table:
    return fitted_table(VIOLATION_COLUMNS, violation_rows(items, now, tz), width)


def describe_reservation(r: Mapping[str, Any], now: datetime, tz: tzinfo | None = None) -> str:
    gpus = ", ".join(gpu_place(g) for g in r.get("gpus") or ())
    return printable(
        f"reservation {r.get('id', '?')}: {gpus} from {when(r.get('start'), now, tz)} "
        f"to {when(r.get('end'), now, tz)} ({r.get('title', '')})"
    )


def describe_job(job: Mapping[str, Any]) -> str:
    text = f"job {job.get('id', '?')} ({job.get('name', '')}): {job.get('status', '?')}"
    if job.get("waiting_reason"):
        text += f" ({job['waiting_reason']})"
    if job.get("failure_reason"):
        text += f" ({job.get('failure')}: {job['failure_reason']})"
    if job.get("interruptions"):
        text += f", handed back {job['interruptions']} times"
    return printable(text)
