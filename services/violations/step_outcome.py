"""What became of an incident's last escalation step, read from its timeline (pure).

The tracker records `escalated` when a step falls due and each handler reports one `action`
entry per target (ok or not, with why). The list of incidents shows only the last step, so it
carries its outcome too: a failed e-mail step reads as failed there, not just as "email".
An `action` entry whose `ok` is None was skipped (its channel is not set up, or nobody was
there to tell): a step of skips alone reads as skipped, never as pending.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

PENDING = "pending"  # taken, no handler has reported yet
OK = "ok"
FAILED = "failed"
PARTLY_FAILED = "partly failed"  # some targets reached, some not
SKIPPED = "skipped"  # nothing was tried: the channel is not set up (the detail says why)


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
    tried = [e for e in reports if e["ok"] is not None]
    failed = [e for e in tried if e["ok"] is False]
    if not reports:
        outcome = PENDING
    elif not tried:
        outcome = SKIPPED
    elif not failed:
        outcome = OK
    else:
        outcome = FAILED if len(failed) == len(tried) else PARTLY_FAILED
    unreached = [e for e in reports if e["ok"] is not True]
    reasons = list(dict.fromkeys(e["detail"] for e in unreached if e["detail"]))  # once each
    return {
        "index": index,
        "step": last["detail"] or "",
        "handler": last["handler"],
        "taken_at": last["at"],
        "outcome": outcome,
        "detail": "; ".join(reasons) or None,
    }


__all__ = ["FAILED", "OK", "PARTLY_FAILED", "PENDING", "SKIPPED", "last_step"]
