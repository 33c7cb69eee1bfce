"""The `warden` tables in a 100-column terminal (`COLUMNS=100`) against a whole embedded Warden
behind its API: no line over 100 columns, one line per GPU and per incident, short incident ids
that `warden violations ID` takes back, a job's tasks on lines of their own, a reservation that
starts tomorrow called upcoming, GPUs written host:index everywhere (a job's wait reason too),
the report's period in dates, notification kinds in words; `warden hosts` and `warden
reservations list` list."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system
from tests.e2e.test_cli_client import Cli, Ran

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]

WIDTH = 100
# A terminal message only (nobody is logged in to read it): the incidents stay open.
STEPS = ["0s terminal offender"]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ApiSystem]:
    async with running_system(
        tmp_path_factory.mktemp("cli-tables"), config={"violations": {"steps": STEPS}}
    ) as system:
        for host in range(2):
            for index in range(4):
                await system.gpu(host, index)  # the reservations service knows every GPU
        yield system


@pytest.fixture
def cli(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    monkeypatch.setenv("COLUMNS", str(WIDTH))
    return Cli(system, tmp_path, monkeypatch, capsys)


def fits(ran: Ran) -> list[str]:
    """The output's lines, each checked to fit the terminal."""
    assert ran.code == 0, ran
    lines = ran.out.splitlines()
    too_wide = [line for line in lines if len(line.rstrip()) > WIDTH]
    assert not too_wide, "\n".join(too_wide)
    return lines


async def reserve(system: ApiSystem, user: str, host: int, index: int, start: datetime) -> int:
    gpu = await system.gpu(host, index)
    client = await system.as_user(user)
    booked = await client.post(
        "/reservations",
        {"gpus": [gpu["uuid"]], "start": start.isoformat(), "duration_minutes": 60, "title": "t"},
    )
    assert booked.status == 201, booked.body
    return int(booked.body["id"])


async def test_status_is_one_line_per_gpu(cli: Cli) -> None:
    fleet = cli.system.fleet
    long = "/usr/bin/python3 /home/carol/projects/llm/train.py --config big.yaml --lr 3e-4"
    for index in range(4):
        fleet.start_process(fleet.hosts[0], index, "carol", long)
    await cli.login()

    async def busy() -> list[str] | None:
        ran = await cli("status")
        return fits(ran) if ran.out.count("carol:python3") == 4 else None

    lines = await cli.system.until(busy, "carol's processes in `warden status`")
    gpu_lines = [line for line in lines if line.split(":")[0] in fleet.hosts]
    assert len(gpu_lines) == len(lines) - 1 == 8  # the header, then one line per GPU
    assert {line.split()[0] for line in gpu_lines} == {
        f"{host}:{index}" for host in fleet.hosts for index in range(4)
    }


async def test_violations_show_short_ids_that_commands_take(cli: Cli) -> None:
    system = cli.system
    host = system.fleet.hosts[1]
    system.fleet.start_process(host, 2, "carol", "python borrow_gpu.py --all-night")
    await reserve(system, "alice", 1, 2, datetime.now(UTC))
    await cli.login("alice")

    async def listed() -> list[dict[str, Any]] | None:
        items = (await cli("violations", "--json")).json()["items"]
        return items or None

    [incident] = await system.until(listed, "carol's incident on alice's GPU")
    lines = fits(await cli("violations"))
    assert len(lines) == 2  # the header, the incident
    assert fits(await cli("violations", "list")) == lines
    short = incident["id"][:8]
    assert lines[1].split()[:3] == [short, "open", f"{host}:2"]

    shown = await cli("violations", short)
    assert shown.code == 0, shown
    assert shown.out.startswith(f"violation {incident['id']}: open on {host}:2")
    assert "offender: carol" in shown.out and "timeline:" in shown.out
    whole = await cli("violations", incident["id"], "--json")
    assert whole.json()["id"] == incident["id"]
    too_short = await cli("violations", short[:4])
    assert too_short.code == 2 and "at least the first 8 characters" in too_short.err
    unknown = await cli("violations", "ffffffff" if short != "ffffffff" else "eeeeeeee")
    assert unknown.code == 1 and "no violation" in unknown.err


async def test_jobs_tasks_on_their_own_lines_and_waits_name_gpus_host_index(cli: Cli) -> None:
    system = cli.system
    host = system.fleet.hosts[1]
    await reserve(system, "bob", 1, 3, datetime.now(UTC))
    await cli.login("alice")
    definition = {
        "name": "two-tasks",
        "tasks": [
            {"host": host, "command": "sleep 30", "gpus": [3]},
            {"host": host, "command": "sleep 30", "gpus": [0]},
        ],
    }
    path = cli.tmp_path / "job.json"
    path.write_text(json.dumps(definition))
    submitted = await cli("submit", str(path), "--queue", "--json")
    assert submitted.code == 0, submitted
    job_id = submitted.json()["id"]

    async def waiting() -> str | None:
        jobs = (await cli("jobs", "--mine", "--json")).json()["items"]
        return next((j["waiting_reason"] for j in jobs if j["id"] == job_id), None)

    reason = await system.until(waiting, "the job's wait reason")
    assert f"GPU {host}:3 is reserved by bob" in reason

    lines = fits(await cli("jobs", "list", "--mine"))
    assert "\\n" not in "\n".join(lines)
    [first] = [i for i, line in enumerate(lines) if "two-tasks" in line]
    assert f"0: {host}, 1 GPU" in lines[first]
    assert lines[first + 1].strip().startswith(f"1: {host}, 1 GPU")


async def test_reservations_list_calls_tomorrows_booking_upcoming(cli: Cli) -> None:
    tomorrow = datetime.now(UTC) + timedelta(days=1)
    booked = await reserve(cli.system, "bob", 0, 3, tomorrow)
    await cli.login("bob")

    async def shown() -> list[str] | None:
        lines = fits(await cli("reservations", "list"))
        return lines if any(line.split()[:1] == [str(booked)] for line in lines) else None

    lines = await cli.system.until(shown, "tomorrow's booking in `warden reservations list`")
    [row] = [line for line in lines if line.split()[:1] == [str(booked)]]
    assert "upcoming" in row and "active" not in row

    await cli.login("alice")
    host = cli.system.fleet.hosts[0]
    start = tomorrow.isoformat()
    refused = await cli("reserve", f"{host}:3", "--start", start, "--duration", "30m")
    assert refused.code == 1
    assert f"GPU {host}:3 is reserved by bob" in refused.err  # as everywhere: host:index


async def test_hosts_alone_lists_them(cli: Cli) -> None:
    await cli.login("admin")
    lines = fits(await cli("hosts"))
    assert lines[0].split()[:2] == ["HOST", "ADDRESS"]
    assert {line.split()[0] for line in lines[1:]} == set(cli.system.fleet.hosts)


async def test_report_and_notifications_speak_words(cli: Cli) -> None:
    await cli.login("alice")
    report = await cli("report", "--start", "2026-01-01", "--end", "2026-02-01")
    assert report.code == 0, report
    assert "2026-01-01 to 2026-02-01 (UTC)" in report.out and "T00:00" not in report.out

    lines = fits(await cli("notifications"))
    assert any(line.startswith("My job failed") and "job_failed" in line for line in lines)
