"""`warden queue` and the STARTS column of `warden jobs` (pure rendering of the API's JSON)."""

from __future__ import annotations

import os
from datetime import UTC, datetime

from rich.console import Console, RenderableType

from services.client.queue import queue_rows, queue_view, user_rows
from services.client.render import job_rows

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

ANSWER = {
    "policy": "fair",
    "half_life_h": 168.0,
    "horizon_h": 168.0,
    "at": "2026-03-10T12:00:00+00:00",
    "jobs": [
        {
            "id": 9,
            "owner": "bob",
            "name": "debug",
            "position": 1,
            "gpus": 1,
            "enqueued_at": "2026-03-10T11:50:00+00:00",
            "max_runtime_s": 600.0,
            "reason": "no host has 1 free GPUs for 10 min",
            "predicted_start": "2026-03-10T13:00:00+00:00",
        },
        {
            "id": 4,
            "owner": "alice",
            "name": "sweep\x1b[2J",  # never reaches the terminal as a control sequence
            "position": 2,
            "gpus": 8,
            "enqueued_at": "2026-03-09T09:00:00+00:00",
            "max_runtime_s": None,
            "reason": "no host has 8 GPUs; behind 1 jobs of users with less usage",
            "predicted_start": None,
        },
    ],
    "users": [
        {"user": "bob", "share": 0.5, "usage_gpu_h": 0.0, "queued": 1, "running": 0},
        {"user": "alice", "share": 0.5, "usage_gpu_h": 41.25, "queued": 1, "running": 2},
    ],
}


def text_of(renderable: RenderableType) -> str:
    console = Console(width=250, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(renderable)
    return console.export_text()


def test_queue_rows_say_order_start_and_reason() -> None:
    first, second = queue_rows(ANSWER["jobs"], NOW, UTC)
    assert first == [
        "1",
        "9",
        "bob",
        "debug",
        "1",
        "11:50",
        "13:00",
        "no host has 1 free GPUs for 10 min",
    ]
    assert second[6] == "not within horizon"
    assert second[5] == "Mon 09:00"


def test_user_rows_show_share_and_usage() -> None:
    assert user_rows(ANSWER["users"]) == [
        ["bob", "50%", "0.0", "0", "1"],
        ["alice", "50%", "41.2", "2", "1"],
    ]


def test_the_view_has_the_policy_both_tables_and_no_control_characters() -> None:
    text = text_of(queue_view(ANSWER, NOW, UTC))
    assert "policy: fair, usage half-life 168 h" in text
    assert "WHY IT WAITS" in text and "GPU-H" in text
    assert "\x1b" not in text and "sweep\\x1b[2J" in text
    empty = text_of(queue_view({**ANSWER, "jobs": [], "policy": "fifo"}, NOW, UTC))
    assert "no job waits in the queue" in empty and "half-life" not in empty


def test_jobs_show_a_queued_jobs_predicted_start() -> None:
    queued = {"id": 1, "owner": "a", "name": "x", "status": "queued", "queued": True, "tasks": []}
    rows = job_rows(
        [
            {**queued, "predicted_start": "2026-03-10T13:00:00+00:00"},
            {**queued, "predicted_start": None},
            {**queued, "status": "running", "predicted_start": None},
            queued,  # an older server: no such field
        ],
        NOW,
        UTC,
    )
    assert [row[-1] for row in rows] == ["13:00", "> horizon", "", ""]
