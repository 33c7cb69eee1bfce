"""The outcome of an incident's last step, as the list of incidents shows it."""

from __future__ import annotations

from typing import Any

import pytest

from services.violations.step_outcome import last_step

NO_SMTP = "e-mail is not configured (smtp_host)"


def entry(kind: str, step_index: int | None = None, **fields: Any) -> dict[str, Any]:
    base = {"at": "2026-03-10T10:00:00+00:00", "kind": kind, "step_index": step_index}
    return {**base, "handler": None, "target": None, "ok": None, "detail": "", **fields}


def escalated(index: int, text: str, at: str = "2026-03-10T10:00:00+00:00") -> dict[str, Any]:
    return entry("escalated", index, handler=text.split()[1], detail=text, at=at)


def report(index: int, ok: bool | None, detail: str = "", target: str = "x") -> dict[str, Any]:
    return entry("action", index, handler="h", target=target, ok=ok, detail=detail)


def test_none_before_any_step() -> None:
    assert last_step([]) is None
    assert last_step([entry("opened"), entry("updated"), entry("resolved")]) is None


def test_the_last_step_taken_is_pending_until_its_handler_reports() -> None:
    entries = [
        entry("opened"),
        escalated(0, "0s terminal offender"),
        report(0, True),
        escalated(1, "60s email owner", at="2026-03-10T10:01:00+00:00"),
    ]
    assert last_step(entries) == {
        "index": 1,
        "step": "60s email owner",
        "handler": "email",
        "taken_at": "2026-03-10T10:01:00+00:00",
        "outcome": "pending",
        "detail": None,
    }


@pytest.mark.parametrize(
    ("reports", "outcome", "detail"),
    [
        ([report(1, True), report(1, None)], "ok", None),  # None: done, nothing to check
        ([report(1, False, NO_SMTP), report(1, False, NO_SMTP, "admin")], "failed", NO_SMTP),
        ([report(1, True), report(1, False, "refused")], "partly failed", "refused"),
        ([report(1, False, "a"), report(1, False, ""), report(1, False, "b")], "failed", "a; b"),
    ],
)
def test_the_outcome_of_the_last_step_from_its_reports(
    reports: list[dict[str, Any]], outcome: str, detail: str | None
) -> None:
    entries = [escalated(0, "0s terminal offender"), report(0, False, "not this one")]
    found = last_step([*entries, escalated(1, "60s email owner"), *reports])
    assert found is not None
    assert (found["index"], found["outcome"], found["detail"]) == (1, outcome, detail)


def test_the_highest_step_is_the_last_whatever_the_order_of_rows() -> None:
    entries = [escalated(1, "60s email owner"), escalated(0, "0s terminal offender")]
    found = last_step([*entries, report(0, True)])
    assert found is not None and (found["index"], found["outcome"]) == (1, "pending")


def test_a_step_of_skips_alone_reads_as_skipped_with_why() -> None:
    why = "skipped: no chat webhook is set up"
    entries = [escalated(0, "0s webhook owner"), report(0, None, why, target="webhook")]
    taken = last_step(entries)
    assert taken is not None
    assert (taken["outcome"], taken["detail"]) == ("skipped", why)


def test_a_skip_beside_a_reached_target_leaves_the_step_ok() -> None:
    entries = [
        escalated(0, "0s email offender+owner"),
        report(0, True, "accepted", target="alice@example.org"),
        report(0, None, "skipped: nobody to send to", target="email"),
    ]
    taken = last_step(entries)
    assert taken is not None
    assert taken["outcome"] == "ok"
