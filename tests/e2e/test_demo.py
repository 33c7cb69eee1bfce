"""`warden demo` as a newcomer runs it: live GPUs from the simulated fleet, health all ok, the
logins it prints work, and the week it seeds is there (once, however often it starts)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from services.sim.demo import format_snapshot, login_block, login_line
from tests.support.polling import until_sync
from tests.support.ports import free_port

pytestmark = pytest.mark.timeout(300)

# The block `warden demo` prints at every start: "  alice / <password>" lines.
LOGIN_RE = re.compile(r"^  ([a-z]+) +/ (\S+)", re.MULTILINE)


def health(port: int) -> dict | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v1/health", timeout=2) as r:
            return json.loads(r.read())
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return None


def request(
    port: int, method: str, path: str, body: Any = None, token: str | None = None, **query: Any
) -> tuple[int, Any]:
    url = f"http://127.0.0.1:{port}/api/v1{path}"
    if query:
        url += "?" + urllib.parse.urlencode(query)
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    data = None if body is None else json.dumps(body).encode()
    call = urllib.request.Request(url, data=data, headers=headers, method=method)
    try:
        with urllib.request.urlopen(call, timeout=10) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, json.loads(err.read() or b"null")


def sign_in(port: int, username: str, password: str) -> tuple[int, Any]:
    return request(port, "POST", "/session", {"username": username, "password": password})


@contextlib.contextmanager
def demo(tmp_path: Path, port: int, log: Path) -> Iterator[subprocess.Popen[bytes]]:
    """`warden demo` on a 2 x 2 fleet in tmp_path/demo; stopped with SIGTERM, which must end
    it cleanly (exit 0, no traceback)."""
    env = {
        **os.environ,
        "WARDEN_GATEWAY_PORT": str(port),
        "HOME": str(tmp_path),
        "PYTHONUNBUFFERED": "1",
    }
    env.pop("WARDEN_CONFIG", None)
    with log.open("w") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "services.cli",
                "demo",
                "--hosts",
                "2",
                "--gpus-per-host",
                "2",
                "--watch",
                "1",
                "--data-dir",
                str(tmp_path / "demo"),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    try:
        yield process
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            code = process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            raise
    assert code == 0, log.read_text()
    assert "Traceback" not in log.read_text()


def logins(log: Path) -> dict[str, str]:
    text = log.read_text()
    block = text[text.index("Sign in at ") :]
    return dict(LOGIN_RE.findall(block))


def seeded(port: int, token: str) -> dict[str, Any] | None:
    """The seeded week as the API shows it to the admin, once all of it is there."""
    now = datetime.now(UTC)
    _, page = request(
        port,
        "GET",
        "/reservations",
        token=token,
        start=(now - timedelta(days=7)).isoformat(),
        end=(now + timedelta(days=7)).isoformat(),
        limit=500,
    )
    _, jobs = request(port, "GET", "/jobs", token=token, limit=500)
    _, open_ = request(port, "GET", "/violations", token=token, status="open", offender="zoe")
    running = [j for j in jobs["items"] if j["status"] == "running" and j["owner"] == "alice"]
    queued = [j for j in jobs["items"] if j["status"] == "queued" and j["owner"] == "bob"]
    if not (running and queued and open_["items"]):
        return None
    _, incident = request(port, "GET", f"/violations/{open_['items'][0]['id']}", token=token)
    if not any(entry["kind"] == "action" for entry in incident["timeline"]):
        return None
    return {"reservations": page["items"], "jobs": jobs["items"], "incident": incident}


def when(item: dict[str, Any], now: datetime) -> str:
    start, end = datetime.fromisoformat(item["start"]), datetime.fromisoformat(item["end"])
    return "past" if end <= now else "future" if start > now else "now"


def test_demo_prints_working_logins_and_seeds_a_week_once(tmp_path: Path) -> None:
    port = free_port()
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with demo(tmp_path, port, first_log) as process:

        def live() -> dict | None:
            answer = health(port)
            if answer and answer["status"] == "ok" and "sim-002     1" in first_log.read_text():
                return answer
            assert process.poll() is None, f"demo exited early:\n{first_log.read_text()}"
            return None

        answer = until_sync(live, "live GPUs", 60, interval=0.2, report=first_log.read_text)
        assert set(answer["services"]) == {
            "gateway",
            "monitor",
            "reservations",
            "jobs",
            "violations",
        }
        text = first_log.read_text()
        assert "HOST      GPU  UTIL" in text
        config = tmp_path / "demo" / "warden.toml"
        assert f"user add NAME --email NAME@localhost --config {config}" in text

        first = logins(first_log)
        assert set(first) == {"admin", "alice", "bob"}
        tokens = {}
        for username, password in first.items():
            status, session = sign_in(port, username, password)
            assert status == 201, session
            tokens[username] = session["access_token"]
            assert sign_in(port, username, password + "x")[0] == 401
        _, me = request(port, "GET", "/users/admin", token=tokens["admin"])
        assert "admin" in me["roles"]

        # The printed `warden user add` writes to the demo's database: the user signs in.
        [printed] = re.findall(r"^  warden (user add NAME .*)$", text, re.MULTILINE)
        words = shlex.split(printed.replace("NAME", "carl"))
        added = subprocess.run(
            [sys.executable, "-m", "services.cli", *words],
            env={**os.environ, "WARDEN_PASSWORD": "pw-carl-12345", "HOME": str(tmp_path)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert added.returncode == 0, added.stderr
        assert sign_in(port, "carl", "pw-carl-12345")[0] == 201

        week = until_sync(
            lambda: seeded(port, tokens["admin"]),
            "the seeded week",
            90,
            interval=0.5,
            report=first_log.read_text,
        )
        now = datetime.now(UTC)
        reservations = week["reservations"]
        assert {when(r, now) for r in reservations} == {"past", "now", "future"}
        assert {r["owner"] for r in reservations} == {"admin", "alice", "bob"}
        incident = week["incident"]
        assert (incident["owner"], incident["status"]) == ("alice", "open")
        first_ids = sorted(r["id"] for r in reservations)
        [first_job] = [j["id"] for j in week["jobs"] if j["status"] == "running"]

    # A second start in the same data dir: new passwords, the old ones refused, nothing twice.
    with demo(tmp_path, port, second_log):
        until_sync(
            lambda: "Sign in at " in second_log.read_text() and health(port),
            "the second start",
            60,
            interval=0.2,
            report=second_log.read_text,
        )
        second = logins(second_log)
        assert set(second) == {"admin", "alice", "bob"}
        assert sign_in(port, "alice", first["alice"])[0] == 401
        token = sign_in(port, "admin", second["admin"])[1]["access_token"]
        week = until_sync(
            lambda: (
                (found := seeded(port, token)) and "Demo data:" in second_log.read_text() and found
            ),
            "the week after a restart",
            90,
            interval=0.5,
            report=second_log.read_text,
        )
        assert sorted(r["id"] for r in week["reservations"]) == first_ids
        # alice's job of the first start ran on the fleet before this one: it ends as after a
        # reboot (its host says `gone`), and a new one runs; bob's waits on in the queue.
        _, old = until_sync(
            lambda: (
                (answer := request(port, "GET", f"/jobs/{first_job}", token=token))[1]["status"]
                == "failed"
                and answer
            ),
            "the first start's job ended",
            60,
            interval=0.5,
            report=second_log.read_text,
        )
        assert "host restarted" in old["tasks"][0]["reason"]
        _, jobs = request(port, "GET", "/jobs", token=token, limit=500)
        active = [j for j in jobs["items"] if j["status"] in ("running", "queued")]
        assert sorted((j["owner"], j["status"]) for j in active) == [
            ("alice", "running"),
            ("bob", "queued"),
        ]
        assert first_job not in {j["id"] for j in active}


def test_the_login_block_and_line_name_every_account() -> None:
    passwords = {"admin": "pw-a", "alice": "pw-b", "bob": "pw-c"}
    block = login_block("http://127.0.0.1:8080", passwords, Path("/d/warden.toml"))
    assert "Sign in at http://127.0.0.1:8080 as any of" in block
    assert dict(LOGIN_RE.findall(block)) == passwords
    assert "  admin / pw-a  (admin)" in block
    assert "user add NAME --email NAME@localhost --config /d/warden.toml" in block
    line = login_line("http://127.0.0.1:8080", passwords)
    assert line == "Sign in at http://127.0.0.1:8080 as admin / pw-a, alice / pw-b, bob / pw-c"


def test_format_snapshot_lists_gpus_processes_and_unreachable_hosts() -> None:
    gpu = {
        "uuid": "GPU-1",
        "index": 0,
        "utilization_gpu_percent": None,
        "memory_used_mib": 100.0,
        "memory_total_mib": 81920.0,
        "temperature_c": 40.0,
    }
    snapshot = {
        "hosts": [
            {
                "name": "h1",
                "reachable": True,
                "sample": {"gpus": [gpu]},
                "processes": [{"gpu_uuid": "GPU-1", "pid": 7, "user": "bob"}],
            },
            {
                "name": "h2",
                "reachable": False,
                "sample": None,
                "processes": [],
                "down_reason": "timed out",
            },
        ]
    }
    lines = format_snapshot(snapshot).splitlines()
    assert lines[1].split() == ["h1", "0", "n/a", "100/81920", "MiB", "40C", "bob:7"]
    assert lines[2].split()[:3] == ["h2", "-", "unreachable:"]
