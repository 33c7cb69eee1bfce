"""A usage report composed from the services' facts (pure): grouped by user, group, host or GPU
model, with totals, and as CSV.

Each fact is one user's figures on one GPU (or one host), from the service that owns them
(`services.shared.usage_report`). A user in several groups counts in each of them (so the
groups' rows may add up to more than the total); a user in none is in the group "(none)".
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Mapping
from typing import Any

from services.shared.usage_report import FIGURES

GROUPINGS = ("user", "group", "host", "gpu_model")
NO_GROUP = "(none)"
UNKNOWN = "(unknown)"

# The columns of a row, in order (also the CSV header).
COLUMNS: tuple[str, ...] = (
    "key",
    "reserved_gpu_hours",
    "used_gpu_hours",
    "idle_gpu_hours",
    "idle_share",
    "unreserved_gpu_hours",
    "violations_caused",
    "violations_suffered",
    "jobs",
)


def _keys(
    fact: Mapping[str, Any],
    by: str,
    models: Mapping[str, str],
    hosts: Mapping[str, str],
    groups: Mapping[str, list[str]],
) -> list[str]:
    """Which rows a fact counts in."""
    if by == "user":
        return [fact["user"]]
    if by == "group":
        return groups.get(fact["user"]) or [NO_GROUP]
    gpu_uuid = fact.get("gpu_uuid")
    if by == "host":
        return [fact.get("host") or hosts.get(gpu_uuid or "") or UNKNOWN]
    return [models.get(gpu_uuid or "") or UNKNOWN]  # gpu_model


def _empty(key: str) -> dict[str, Any]:
    row: dict[str, Any] = {"key": key}
    for name in FIGURES:
        row[name] = 0 if name.startswith(("violations", "jobs")) else 0.0
    return row


def _finished(row: dict[str, Any]) -> dict[str, Any]:
    measured = row["used_gpu_hours"] + row["idle_gpu_hours"]
    row["idle_share"] = round(row["idle_gpu_hours"] / measured, 4) if measured > 0 else None
    for name in ("reserved_gpu_hours", "used_gpu_hours", "idle_gpu_hours", "unreserved_gpu_hours"):
        row[name] = round(row[name], 4)
    return {column: row[column] for column in COLUMNS}


def compose(
    facts: Iterable[Mapping[str, Any]],
    gpus: Iterable[Mapping[str, Any]],
    memberships: Iterable[Mapping[str, Any]],
    by: str,
    only_user: str | None = None,
) -> dict[str, Any]:
    """`{"rows": [...], "totals": {...}}`, rows sorted by key; `only_user`: that user's facts
    alone (what a non-admin sees)."""
    models = {gpu["uuid"]: gpu.get("model") or UNKNOWN for gpu in gpus}
    hosts = {gpu["uuid"]: gpu["host"] for gpu in gpus}
    groups = {entry["user"]: list(entry["groups"]) for entry in memberships}
    rows: dict[str, dict[str, Any]] = {}
    totals = _empty("total")
    for fact in facts:
        if only_user is not None and fact["user"] != only_user:
            continue
        figures = {name: fact[name] for name in FIGURES if fact.get(name)}
        for name, value in figures.items():
            totals[name] += value
        for key in _keys(fact, by, models, hosts, groups):
            row = rows.get(key)
            if row is None:
                row = rows[key] = _empty(key)
            for name, value in figures.items():
                row[name] += value
    return {
        "rows": [_finished(rows[key]) for key in sorted(rows)],
        "totals": _finished(totals),
    }


def to_csv(report: Mapping[str, Any], by: str) -> str:
    """The rows and a last `total` row, with a header; the first column is named after `by`."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([by, *COLUMNS[1:]])
    for row in [*report["rows"], report["totals"]]:
        writer.writerow(["" if row[c] is None else row[c] for c in COLUMNS])
    return out.getvalue()
