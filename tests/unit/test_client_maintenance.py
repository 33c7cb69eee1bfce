"""`warden hosts drain|undrain` and `warden maintenance` (services/client/maintenance.py): the
target read from the command line, the lines printed, and the requests sent (to a recording
double of the API client)."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from services.client import maintenance
from services.client.args import UsageError

NOW = datetime(2026, 12, 2, 8, 0, tzinfo=UTC)
WINDOW = {
    "id": 4,
    "host": "dgx1",
    "gpus": [0, 1],
    "target": "dgx1:0,1",
    "start": NOW.isoformat(),
    "end": None,
    "reason": "new fan",
    "bookings": "keep",
    "created_by": "admin",
    "created_at": NOW.isoformat(),
    "ended_by": None,
    "status": "scheduled",
}


class RecordingApi:
    """Answers from `answers` by (method, path); records every request."""

    def __init__(self, answers: dict[tuple[str, str], Any]) -> None:
        self.answers = answers
        self.sent: list[tuple[str, str, Any]] = []

    def request(self, method: str, path: str, *, query: Any = None, body: Any = None) -> Any:
        self.sent.append((method, path, body if body is not None else query))
        return self.answers[(method, path)]

    def get(self, path: str, **query: Any) -> Any:
        return self.request("GET", path, query=query)

    def post(self, path: str, body: Any = None) -> Any:
        return self.request("POST", path, body=body)


def test_a_target_is_a_host_or_some_of_its_gpus() -> None:
    assert maintenance.parse_target("dgx1") == ("dgx1", None)
    assert maintenance.parse_target("dgx1:3") == ("dgx1", [3])
    assert maintenance.parse_target("dgx1:2,0-1") == ("dgx1", [0, 1, 2])
    for bad in ("", "dgx1:", ":0", "dgx1:x", "dgx1:0-"):
        with pytest.raises(UsageError):
            maintenance.parse_target(bad)


def test_drain_sends_the_window_and_prints_what_became_of_each_booking(
    capsys: pytest.CaptureFixture[str],
) -> None:
    booking = {
        "reservation_id": 7,
        "owner": "alice",
        "start": NOW.isoformat(),
        "end": (NOW + timedelta(hours=2)).isoformat(),
        "outcome": "kept",
        "alternative": {
            "start": NOW.isoformat(),
            "end": NOW.isoformat(),
            "gpus": [{"host": "dgx2", "index": 0}],
        },
        "moved_to": None,
    }
    api = RecordingApi({("POST", "/maintenance"): {**WINDOW, "affected": [booking]}})
    args = argparse.Namespace(
        target="dgx1:0,1",
        reason="new fan",
        bookings="keep",
        start=None,
        end=None,
        json=False,
        stop_jobs=False,
    )
    assert maintenance.cmd_drain(args, api) == 0  # type: ignore[arg-type]
    assert api.sent == [
        (
            "POST",
            "/maintenance",
            {"host": "dgx1", "reason": "new fan", "bookings": "keep", "gpus": [0, 1]},
        )
    ]
    out = capsys.readouterr().out
    assert "#4 dgx1:0,1 drained from" in out and "further notice" in out and "new fan" in out
    assert "reservation #7 of alice" in out and "alternative dgx2:0" in out
    assert "running jobs are not stopped (--stop-jobs stops them)" in out


def test_undrain_by_host_ends_each_window_of_that_host() -> None:
    other = {**WINDOW, "id": 5, "host": "dgx2", "target": "dgx2"}
    api = RecordingApi(
        {
            ("GET", "/maintenance"): [WINDOW, other],
            ("DELETE", "/maintenance/4"): {**WINDOW, "status": "removed"},
        }
    )
    args = argparse.Namespace(target="dgx1", json=False)
    assert maintenance.cmd_undrain(args, api) == 0  # type: ignore[arg-type]
    assert [(m, p) for m, p, _ in api.sent] == [
        ("GET", "/maintenance"),
        ("DELETE", "/maintenance/4"),
    ]
    nothing = RecordingApi({("GET", "/maintenance"): [other]})
    assert maintenance.cmd_undrain(argparse.Namespace(target="dgx1:0", json=False), nothing) == 1  # type: ignore[arg-type]
