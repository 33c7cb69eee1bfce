"""The `warden` client's pure parts: tables from the API's JSON, times and durations, the
credentials file, error texts; and its HTTP client's refresh-once against a stub server."""

from __future__ import annotations

import json
import os
import stat
import threading
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from services.cli import main
from services.client.api import (
    Api,
    ApiError,
    NotSignedIn,
    ServerUnreachable,
    error_lines,
    format_error,
    reason_texts,
)
from services.client.args import expand_gpus, parse_duration, parse_time
from services.client.jobs import load_definition
from services.client.render import (
    COMMAND_WIDTH,
    NONE,
    STATUS_COLUMNS,
    describe_reservation,
    job_rows,
    printable,
    process_text,
    reservation_rows,
    reservations_table,
    short_command,
    status_rows,
    status_table,
    violation_rows,
    when,
)
from services.client.store import (
    DEFAULT_SERVER,
    Credentials,
    CredentialsError,
    CredentialStore,
    credentials_path,
    normalize_server,
    server_url,
)
from tests.support.ports import free_port

CET = timezone(timedelta(hours=1))
NOW = datetime(2026, 3, 10, 12, 0, tzinfo=CET)  # 11:00 UTC


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    return home


def text_of(table: Table) -> str:
    console = Console(width=250, record=True, file=open(os.devnull, "w"))  # noqa: SIM115
    console.print(table)
    return console.export_text()


def reservation(owner: str, start: str, end: str, **more: Any) -> dict[str, Any]:
    return {"id": 7, "owner": owner, "start": start, "end": end, "gpus": [], **more}


def gpu(**fields: Any) -> dict[str, Any]:
    base = {
        "uuid": "GPU-1",
        "host": "dgx1",
        "index": 0,
        "name": "NVIDIA A100",
        "utilization_gpu_percent": 87.0,
        "memory_used_mib": 40960,
        "memory_total_mib": 81920,
        "temperature_c": 60,
        "processes": [],
        "reservation": None,
        "next_reservation": None,
        "reachable": True,
        "sampled_at": "2026-03-10T11:00:00+00:00",
    }
    return {**base, **fields}


# --- the status table ---------------------------------------------------------------------------


def test_status_rows_show_figures_processes_and_who_holds_the_gpu() -> None:
    payload = {
        "gpus": [
            gpu(
                processes=[
                    {"pid": 4242, "user": "alice", "command": "python train.py"},
                    {"pid": 99, "user": None, "command": "?"},
                ],
                reservation=reservation(
                    "alice", "2026-03-10T10:00:00+00:00", "2026-03-10T13:30:00+00:00"
                ),
                next_reservation=reservation(
                    "bob", "2026-03-11T08:00:00+00:00", "2026-03-11T10:00:00+00:00"
                ),
            )
        ],
        "generated_at": "2026-03-10T11:00:00+00:00",
    }

    [row] = status_rows(payload, NOW, CET)

    assert row == [
        "dgx1:0",
        "A100",  # every GPU here is an NVIDIA one
        "87%",
        "40.0/80.0 GiB",
        "alice:python train.py(4242), ?(99)",
        "alice till 14:30",  # today, local time: the time only
        "bob Wed 09:00",  # another day of the week: its name too
    ]


def test_figures_not_reported_are_a_dash_never_zero() -> None:
    payload = {
        "gpus": [
            gpu(utilization_gpu_percent=None, memory_used_mib=None, memory_total_mib=81920),
            gpu(
                uuid="GPU-2",
                index=1,
                name=None,
                utilization_gpu_percent=None,
                memory_used_mib=None,
                memory_total_mib=None,
            ),
        ]
    }

    first, second = status_rows(payload, NOW, CET)

    assert first[2] == NONE == "\u2013"
    assert first[3] == f"{NONE}/80.0 GiB"
    assert second[1:4] == [NONE, NONE, NONE]
    assert second[4:] == [NONE, NONE, NONE]  # no processes, no reservations
    assert "0%" not in text_of(status_table(payload, NOW, CET))


def test_zero_is_shown_as_zero() -> None:
    [row] = status_rows({"gpus": [gpu(utilization_gpu_percent=0, memory_used_mib=0)]}, NOW, CET)
    assert row[2] == "0%" and row[3] == "0.0/80.0 GiB"


def test_unreachable_hosts_are_marked_and_rows_are_in_host_and_index_order() -> None:
    payload = {
        "gpus": [
            gpu(host="dgx2", index=1, uuid="c"),
            gpu(host="dgx2", index=0, uuid="b", reachable=False, utilization_gpu_percent=None),
            gpu(host="dgx1", index=3, uuid="a"),
        ]
    }
    rows = status_rows(payload, NOW, CET)
    assert [(r[0], r[4]) for r in rows] == [
        ("dgx1:3", NONE),
        ("dgx2:0", "host unreachable"),
        ("dgx2:1", NONE),
    ]


def test_the_status_table_has_its_columns_and_never_reads_markup() -> None:
    payload = {"gpus": [gpu(processes=[{"pid": 1, "user": "[bold]eve[/bold]"}])]}
    table = status_table(payload, NOW, CET)
    assert [column.header for column in table.columns] == [c.header for c in STATUS_COLUMNS]
    assert "[bold]eve[/bold](1)" in text_of(table)


@pytest.mark.parametrize(
    ("process", "text"),
    [
        ({"pid": 7, "user": "carol", "command": "/usr/bin/python3 -m torch.distributed.run x.py"},
         "carol:python3 -m torch.distributed.ru\u2026(7)"),
        ({"pid": 7, "user": "bob", "command": "python -u /home/bob/llm/train.py --out /x/y"},
         "bob:python -u train.py --out /x/y(7)"),
        ({"pid": 7, "user": "carol", "command": ""}, "carol(7)"),
        ({"pid": 7, "user": None, "command": "  ./serve  --port 80 "}, "serve --port 80(7)"),
        ({"pid": 7, "user": None, "command": ""}, "pid 7"),
        ({"pid": 7}, "pid 7"),
    ],
)  # fmt: skip
def test_a_process_is_user_command_and_pid_as_far_as_they_are_known(
    process: dict[str, Any], text: str
) -> None:
    assert process_text(process) == text
    assert len(short_command("x" * 100)) == COMMAND_WIDTH


# --- the other tables ---------------------------------------------------------------------------


def test_reservation_rows() -> None:
    items = [
        {
            "id": 12,
            "owner": "alice",
            "gpus": [
                {"uuid": "GPU-a", "host": "dgx1", "index": 0},
                {"uuid": "GPU-b", "host": "dgx1", "index": 1},
                {"uuid": "MIG-x", "host": "dgx1", "index": None},
            ],
            "start": "2026-03-10T12:00:00+00:00",
            "end": "2026-03-12T12:00:00+00:00",
            "status": "active",
            "title": "rn50 [sweep]",
        }
    ]
    [row] = reservation_rows(items, NOW, CET)
    assert row == [
        "12",
        "alice",
        "dgx1:0, dgx1:1, MIG-x",
        "13:00",
        "Thu 13:00",
        "upcoming",  # the API's `active`: it starts in an hour
        "rn50 [sweep]",
    ]
    assert "rn50 [sweep]" in text_of(reservations_table(items, NOW, CET, title="mine"))


def test_job_rows() -> None:
    job = {
        "id": 3,
        "owner": "bob",
        "name": "resnet",
        "status": "failed",
        "queued": False,
        "waiting_reason": None,
        "tasks": [
            {"index": 0, "host": "dgx1", "gpus": ["GPU-a", "GPU-b"], "status": "succeeded"},
            {"index": 1, "host": "dgx2", "gpus": ["GPU-c"], "status": "failed", "exit_code": 3},
        ],
        "created_at": "2026-03-10T10:30:00+00:00",
    }
    waiting = {
        "id": 4,
        "owner": "bob",
        "name": "q",
        "status": "queued",
        "queued": True,
        "waiting_reason": "GPU dgx1:3 is busy",
        "tasks": [{"index": 0, "host": None, "gpus": [], "gpu_count": 2, "status": "pending"}],
        "created_at": "2026-03-09T10:30:00+00:00",
    }
    first, second = job_rows([job, waiting], NOW, CET)
    assert first[:4] == ["3", "bob", "resnet", "failed"]
    assert first[4] == ("0: dgx1, 2 GPUs, succeeded", "1: dgx2, 1 GPU, failed (exit 3)")
    assert first[5] == "11:30"
    assert second[4] == ("0: any host, 2 GPUs, pending",)
    assert second[5] == "Mon 11:30"
    assert second[6] == "GPU dgx1:3 is busy"


def test_violation_rows() -> None:
    incident = {
        "id": "inc-1",
        "status": "resolved",
        "host": "dgx1",
        "gpu_uuid": "GPU-a",
        "gpu_index": 2,
        "offender": "bob",
        "owner": "alice",
        "opened_at": "2026-03-10T10:00:00+00:00",
        "resolved_at": "2026-03-10T10:05:00+00:00",
        "resolve_reason": "process ended",
        "processes": [{"pid": 77, "command": "python steal.py"}],  # as the API gives them
    }
    [row] = violation_rows([incident], NOW, CET)
    assert row == [
        "inc-1",
        "resolved",
        "dgx1:2",
        "bob",
        "python steal.py(77)",  # an incident's processes have no user: the offender column
        "alice",
        "11:00",
        "11:05 (process ended)",
    ]


# --- times, durations, GPUs -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "minutes"),
    [("2h", 120), ("90m", 90), ("1d", 1440), ("1w", 10080), ("1h30m", 90), ("45", 45)],
)
def test_durations(text: str, minutes: int) -> None:
    assert parse_duration(text) == timedelta(minutes=minutes)


@pytest.mark.parametrize("text", ["", "0m", "2x", "h", "1.5h", "-1h", "2h junk"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError):
        parse_duration(text)


def test_times() -> None:
    assert parse_time("now", NOW, CET) == NOW
    assert parse_time("+30m", NOW, CET) == NOW + timedelta(minutes=30)
    assert parse_time("14:30", NOW, CET) == datetime(2026, 3, 10, 14, 30, tzinfo=CET)
    assert parse_time("2026-03-11T08:00", NOW, CET) == datetime(2026, 3, 11, 8, 0, tzinfo=CET)
    assert parse_time("2026-03-11T08:00Z", NOW, CET) == datetime(2026, 3, 11, 8, 0, tzinfo=UTC)
    for bad in ("25:00", "tomorrow", "+", "12:3"):
        with pytest.raises(ValueError):
            parse_time(bad, NOW, CET)


def test_when_gives_the_date_only_for_another_day() -> None:
    assert when("2026-03-10T22:59:00+00:00", NOW, CET) == "23:59"
    assert when("2026-03-10T23:00:00+00:00", NOW, CET) == "Wed 00:00"
    assert when("2026-03-15T23:00:00+00:00", NOW, CET) == "Mon 00:00"  # six days on
    assert when("2026-03-17T23:00:00+00:00", NOW, CET) == "Mar 18 00:00"
    assert when("2026-03-03T10:00:00+00:00", NOW, CET) == "Mar 03 11:00"  # a week ago
    assert when("2027-01-04T08:00:00+00:00", NOW, CET) == "2027-01-04 09:00"  # another year
    assert when(None, NOW, CET) == NONE


def test_gpu_lists_expand() -> None:
    assert expand_gpus(["dgx1:0,1", "dgx2:3", "GPU-1234"]) == [
        "dgx1:0",
        "dgx1:1",
        "dgx2:3",
        "GPU-1234",
    ]


def test_job_definitions_from_json_and_toml(tmp_path: Path) -> None:
    as_json = tmp_path / "job.json"
    as_json.write_text(json.dumps({"name": "a", "tasks": [{"command": "x"}]}))
    as_toml = tmp_path / "job.toml"
    as_toml.write_text('name = "a"\n[[tasks]]\ncommand = "x"\ngpus = [0]\n')
    assert load_definition(as_json) == {"name": "a", "tasks": [{"command": "x"}]}
    assert load_definition(as_toml) == {"name": "a", "tasks": [{"command": "x", "gpus": [0]}]}


# --- the credentials file -----------------------------------------------------------------------


def test_credentials_live_under_the_xdg_config_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, isolated_home: Path
) -> None:
    assert credentials_path() == tmp_path / "xdg-config" / "warden" / "client.json"
    monkeypatch.delenv("XDG_CONFIG_HOME")
    assert credentials_path() == isolated_home / ".config" / "warden" / "client.json"


def test_credentials_are_written_private_whatever_the_umask() -> None:
    store = CredentialStore()
    saved = Credentials("http://warden:8080", "alice", "access-secret", "refresh-secret")
    old = os.umask(0)
    try:
        store.save(saved)
        store.save(saved)  # again, over the file
    finally:
        os.umask(old)
    assert stat.S_IMODE(store.path.stat().st_mode) == 0o600
    assert stat.S_IMODE(store.path.parent.stat().st_mode) == 0o700
    assert store.load() == saved
    assert [p.name for p in store.path.parent.iterdir()] == ["client.json"]  # no temp left
    assert "secret" not in repr(saved)
    assert store.delete() and not store.delete()
    assert store.load() is None


def test_a_broken_credentials_file_is_an_error() -> None:
    store = CredentialStore()
    store.path.parent.mkdir(parents=True)
    store.path.write_text("{not json")
    with pytest.raises(CredentialsError):
        store.load()
    store.path.write_text(json.dumps({"username": "x"}))
    with pytest.raises(CredentialsError, match="no server"):
        store.load()


def test_the_server_url(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))  # no local config: not the developer's
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    monkeypatch.delenv("WARDEN_CONFIG", raising=False)
    stored = Credentials("http://stored:8080")
    assert server_url(None) == DEFAULT_SERVER
    assert server_url(stored) == "http://stored:8080"
    monkeypatch.setenv("WARDEN_SERVER", "env:9000/")
    assert server_url(stored) == "http://env:9000"
    assert server_url(stored, "https://given/api/v1/") == "https://given"
    with pytest.raises(ValueError):
        normalize_server("ftp://x")


# --- errors -------------------------------------------------------------------------------------


def test_reasons_are_one_per_line() -> None:
    details = {
        "reasons": [
            {"code": "conflict", "message": "dgx1/0 is reserved by bob from 10:00 to 12:00"},
            {"reason": "outside your hours"},
            "plain text",
            {"code": "odd"},
        ]
    }
    assert reason_texts(details) == [
        "dgx1/0 is reserved by bob from 10:00 to 12:00",
        "outside your hours",
        "plain text",
        '{"code": "odd"}',
    ]
    assert reason_texts({}) == [] == reason_texts(None)


def test_a_refusal_lists_its_reasons_under_a_heading() -> None:
    reasons = ["dgx1/0 is reserved by bob", "dgx1/1 is reserved by eve"]
    err = ApiError(409, "reservation_conflict", "; ".join(reasons), {"reasons": reasons})
    assert format_error(err) == (
        "refused: the GPUs are reserved:\n  - dgx1/0 is reserved by bob\n"
        "  - dgx1/1 is reserved by eve"
    )
    # A message that says more than its reasons is kept.
    assert error_lines("not_allowed", "not now", ["outside your hours"]) == [
        "not now",
        "  - outside your hours",
    ]
    assert format_error(ApiError(404, "not_found", "no reservation 9")) == "no reservation 9"


# --- the HTTP client against a stub server ------------------------------------------------------


class Stub(BaseHTTPRequestHandler):
    """Answers /api/v1/me for the token "fresh" only; /session/refresh rotates "r1" → "r2"."""

    calls: list[str] = []

    def log_message(self, *args: Any) -> None:
        pass

    def answer(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self.calls.append(f"GET {self.path}")
        if self.headers.get("Authorization") == "Bearer fresh":
            self.answer(200, {"user": {"username": "alice"}})
        else:
            self.answer(
                401,
                {
                    "error": "authentication_failed",
                    "message": "the access token expired; refresh it",
                    "details": {},
                },
            )

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.calls.append(f"POST {self.path}")
        if self.path == "/api/v1/session/refresh" and body == {"refresh_token": "r1"}:
            self.answer(
                200,
                {"access_token": "fresh", "refresh_token": "r2", "user": {"username": "alice"}},
            )
        else:
            self.answer(401, {"error": "authentication_failed", "message": "no", "details": {}})


@pytest.fixture
def stub() -> Iterator[str]:
    Stub.calls = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def test_an_expired_token_is_refreshed_once_and_the_new_tokens_stored(stub: str) -> None:
    store = CredentialStore()
    store.save(Credentials(stub, "alice", "stale", "r1"))
    api = Api(stub, credentials=store.load(), store=store)

    assert api.get("/me") == {"user": {"username": "alice"}}

    assert Stub.calls == ["GET /api/v1/me", "POST /api/v1/session/refresh", "GET /api/v1/me"]
    stored = store.load()
    assert stored is not None
    assert (stored.access_token, stored.refresh_token) == ("fresh", "r2")


def test_tokens_another_command_refreshed_are_used_not_refreshed_again(stub: str) -> None:
    store = CredentialStore()
    mine = Credentials(stub, "alice", "stale", "r0")
    store.save(Credentials(stub, "alice", "fresh", "r-other"))  # written meanwhile

    assert Api(stub, credentials=mine, store=store).get("/me")["user"]["username"] == "alice"
    assert "POST /api/v1/session/refresh" not in Stub.calls


def test_a_refused_refresh_asks_to_sign_in_again(stub: str) -> None:
    store = CredentialStore()
    store.save(Credentials(stub, "alice", "stale", "revoked"))
    with pytest.raises(NotSignedIn, match="warden login"):
        Api(stub, credentials=store.load(), store=store).get("/me")
    assert Stub.calls.count("POST /api/v1/session/refresh") == 1


def test_an_unreachable_server_says_where_and_what_to_do() -> None:
    nowhere = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(ServerUnreachable) as caught:
        Api(nowhere).request("GET", "/health", auth=False)
    assert caught.value.message.startswith(f"cannot reach the Warden server at {nowhere}: ")
    assert "`warden login --server URL`" in caught.value.message


# --- exit statuses ------------------------------------------------------------------------------


def test_exit_statuses(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["reserve", "--duration", "2h"]) == 2  # neither GPUs nor --count
    assert "--count" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        main(["reserve", "dgx1:0", "--duration", "soon"])
    assert usage.value.code == 2
    capsys.readouterr()
    assert main(["status"]) == 1  # not signed in
    assert "warden login" in capsys.readouterr().err
    assert main(["logout"]) == 0


HOSTILE = "\x1b[2J\x1b[31mPWNED\r\nfake line\x07\x9b"


def test_no_control_character_of_the_api_reaches_the_terminal() -> None:
    now = datetime(2026, 12, 1, 12, tzinfo=UTC)
    item = reservation("mallory", "2026-12-01T10:00:00+00:00", "2026-12-01T14:00:00+00:00")
    item["title"] = HOSTILE
    shown = text_of(reservations_table([item], now))
    described = describe_reservation(item, now)
    for text in (shown, described):
        assert not any(c in text for c in "\x1b\r\x07\x9b")
        assert "\\x1b[2J" in text  # shown, as its escape
    assert "fake line" in shown and "\n" not in described


def test_printable_leaves_printable_text_alone() -> None:
    assert printable("Zürich 训练 — ok") == "Zürich 训练 — ok"
    assert printable("a\tb") == "a\\tb"
