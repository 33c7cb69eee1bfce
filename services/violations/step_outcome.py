"""What became of an incident's last escalation step, read from its timeline (pure).

The tracker records `escalated` when a step falls due and each handler reports one `action`
entry per target (ok or not, with why). The list of incidents shows only the last step, so it
carries its outcome too: a failed e-mail step reads as failed there, not just as "email".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PENDING = "pending"  # taken, no handler has reported yet
OK = "ok"
FAILED = "failed"
PARTLY_FAILED = "partly failed"  # some targets reached, some not


def last_step(entries: Iterable[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The incident's last escalated step and its outcome, or None before any step.

    `entries`: its timeline entries (oldest first), each with `at`, `kind`, `step_index`,
    `handler`, `ok`, `detail`; only `escalated` and `action` entries are read.
    """
    entries = list(entries)
    escalated = [e for e in entries if e["kind"] == "escalated" and e["step_index"] is not None]
    if not escalated:
        return None
    last = max(escalated, key=lambda e: e["step_index"])
    index = last["step_index"]
    reports = [e for e in entries if e["kind"] == "action" and e["step_index"] == index]
    failed = [e for e in reports if e["ok"] is False]
    if not reports:
        outcome = PENDING
    elif not failed:
        outcome = OK
    else:
        outcome = FAILED if len(failed) == len(reports) else PARTLY_FAILED
    reasons = list(dict.fromkeys(e["detail"] for e in failed if e["detail"]))  # once each
    return {
        "index": index,
        "step": last["detail"] or "",
        "handler": last["handler"],
        "taken_at": last["at"],
        "outcome": outcome,
        "detail": "; ".join(reasons) or None,
    }


__all__ = ["FAILED", "OK", "PARTLY_FAILED", "PENDING", "last_step"]
