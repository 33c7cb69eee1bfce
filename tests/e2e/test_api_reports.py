"""Usage reports end to end: every service and the gateway on RabbitMQ, with a reservation that
has usage, one that was never measured, an incident and a job written to the services' own
databases; the figures each role sees through the API, as JSON and as CSV.

The seeded facts, all in the last day (hours before now):
- alice reserves GPU-report-0 for 2 h, a quarter of its samples idle: 2 h reserved, 1.5 used;
- bob reserves GPU-report-1 for 1 h, never measured: 1 h reserved, nothing used or idle;
- bob's process on alice's reserved GPU for 30 min: bob caused 1, alice suffered 1,
  bob used 0.5 GPU-hours without a reservation;
- alice's job ran 1 h on GPU-report-1 without a reservation: 1 job, 1 unreserved GPU-hour.
Both are in the default group "users", alice also in "ml".
"""

from __future__ import annotations

import csv
import io
import json
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from sqlalchemy import insert, select

from services.jobs.tables import jobs, runs, tasks
from services.reservations.tables import gpu_slots, gpus, group_members, groups, reservations, users
from services.shared.storage import db
from services.shared.storage.store import Store
from services.sim.model import SimFleet
from services.violations.tables import incidents
from tests.e2e.api import EVERY_SERVICE, ApiSystem, _answers
from tests.e2e.test_cli_client import Cli
from tests.support.accounts import cheap_passwords
from tests.support.fleet import served_fleet
from tests.support.ports import free_port
from tests.support.system import buses, running_services, system_settings

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(180), pytest.mark.amqp]

H = 3_600_000
MODEL = "NVIDIA A100-SXM4-80GB"


async def _seed(settings: Any, now: int) -> None:
    async def write(service: str, rows: list[tuple[Any, list[dict[str, Any]]]]) -> None:
        engine = db.create_engine(settings.storage.database_url_for(service))
        try:
            async with Store(engine).write() as conn:
                if service == "reservations":
                    found = await conn.execute(select(users.c.id, users.c.username))
                    ids = {name: user_id for user_id, name in found}
                    rows.append((group_members, [{"group_id": 100, "user_id": ids["alice"]}]))
                for table, values in rows:
                    await conn.execute(insert(table), values)
        finally:
            await engine.dispose()

    def booking(rid: int, owner: str, gpu: str, start: int, end: int, usage: Any) -> dict:
        return {
            "id": rid,
            "owner": owner,
            "title": "seeded",
            "description": "",
            "start_ms": start,
            "end_ms": end,
            "status": "active",
            "created_by": owner,
            "created_at_ms": start - H,
            "updated_at_ms": start - H,
            "cancelled_by_rules": False,
            "started_event_ms": start,
            "ended_event_ms": end,
            "usage": usage,
        }

    def slot(rid: int, owner: str, gpu: str, start: int, end: int) -> dict:
        return {
            "reservation_id": rid,
            "gpu_uuid": gpu,
            "owner": owner,
            "start_ms": start,
            "end_ms": end,
            "active": True,
        }

    usage = {"totals": {"gpu_samples": 100, "idle_samples": 25}, "last_ms": {}}
    a0, a1, b0, b1 = now - 5 * H, now - 3 * H, now - 8 * H, now - 7 * H
    await write(
        "reservations",
        [
            (
                groups,
                [
                    {
                        "id": 100,
                        "name": "ml",
                        "description": "",
                        "is_default": False,
                        "created_at_ms": now - 24 * H,
                    }
                ],
            ),
            (
                gpus,
                [
                    {
                        "uuid": f"GPU-report-{i}",
                        "host": "rack1",
                        "gpu_index": i,
                        "name": MODEL,
                        "memory_total_mib": 81920.0,
                        "present": True,
                        "first_seen_ms": now - 24 * H,
                        "last_change_ms": now - 24 * H,
                    }
                    for i in (0, 1)
                ],
            ),
            (
                reservations,
                [
                    booking(1, "alice", "GPU-report-0", a0, a1, usage),
                    booking(2, "bob", "GPU-report-1", b0, b1, None),
                ],
            ),
            (
                gpu_slots,
                [slot(1, "alice", "GPU-report-0", a0, a1), slot(2, "bob", "GPU-report-1", b0, b1)],
            ),
        ],
    )
    await write(
        "violations",
        [
            (
                incidents,
                [
                    {
                        "id": "seeded-1",
                        "host": "rack1",
                        "gpu_uuid": "GPU-report-0",
                        "gpu_index": 0,
                        "offender": "bob",
                        "mode": "reservations",
                        "reservation_id": 1,
                        "owner": "alice",
                        "reservation_start_ms": a0,
                        "reservation_end_ms": a1,
                        "opened_at_ms": a0 + H,
                        "since_ms": a0 + H,
                        "last_seen_at_ms": a0 + H + H // 2,
                        "resolved_at_ms": a0 + H + H // 2,
                        "resolve_reason": "gone",
                        "processes": "[]",
                        "steps": "[]",
                    }
                ],
            )
        ],
    )
    task = {
        "host": "rack1",
        "command": "python train.py",
        "gpus": ["GPU-report-1"],
        "gpu_count": None,
        "cwd": "",
        "params": [],
        "env": {},
        "role": "worker",
    }
    j0, j1 = now - 12 * H, now - 11 * H
    await write(
        "jobs",
        [
            (
                jobs,
                [
                    {
                        "id": 1,
                        "owner": "alice",
                        "name": "train",
                        "description": "",
                        "spec": json.dumps(
                            {"params": [], "env": {}, "template": None, "tasks": [task]}
                        ),
                        "status": "succeeded",
                        "queued": False,
                        "reservation_id": None,
                        "from_queue": True,
                        "interrupted_for": "[]",
                        "created_at_ms": j0 - H,
                        "updated_at_ms": j1,
                    }
                ],
            ),
            (
                tasks,
                [
                    {
                        "job_id": 1,
                        "task_index": 0,
                        "status": "succeeded",
                        "run": 1,
                        "host": "rack1",
                        "gpus": '["GPU-report-1"]',
                        "started_at_ms": j0,
                        "ended_at_ms": j1,
                        "exit_code": 0,
                    }
                ],
            ),
            (
                runs,
                [
                    {
                        "job_id": 1,
                        "task_index": 0,
                        "run": 1,
                        "host": "rack1",
                        "gpus": '["GPU-report-1"]',
                        "status": "succeeded",
                        "exit_code": 0,
                        "started_at_ms": j0,
                        "ended_at_ms": j1,
                    }
                ],
            ),
        ],
    )


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory, amqp_url_module: str
) -> AsyncIterator[ApiSystem]:
    tmp_path: Path = tmp_path_factory.mktemp("api-reports")
    fleet = SimFleet(1, 1, seed=5, churn=False)
    with cheap_passwords():
        async with served_fleet(fleet, tmp_path) as served:
            port = free_port()
            settings = await system_settings(
                tmp_path,
                served,
                bus={"amqp_url": amqp_url_module},
                gateway={"port": port, "frontend_dir": str(tmp_path / "no-frontend")},
            )
            await _seed(settings, int(time.time() * 1000))
            base = f"http://127.0.0.1:{port}"
            async with (
                buses(settings, "amqp") as (bus, client),
                running_services(EVERY_SERVICE, settings, "amqp", bus) as services,
                aiohttp.ClientSession() as session,
            ):
                found = ApiSystem(base, settings, fleet, client, session, {})  # type: ignore[arg-type]
                await found.until(
                    lambda: _answers(session, base, services, EVERY_SERVICE), "the gateway"
                )
                yield found


def _rows(body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["key"]: row for row in body["rows"]}


async def test_an_admin_sees_everyone_by_user(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    answer = await admin.get("/reports/usage", by="user")
    assert answer.status == 200, answer.body
    rows = _rows(answer.body)
    assert rows["alice"] == {
        "key": "alice",
        "reserved_gpu_hours": 2.0,
        "used_gpu_hours": 1.5,
        "idle_gpu_hours": 0.5,
        "idle_share": 0.25,
        "unreserved_gpu_hours": 1.0,
        "violations_caused": 0,
        "violations_suffered": 1,
        "jobs": 1,
    }
    assert rows["bob"] == {
        "key": "bob",
        "reserved_gpu_hours": 1.0,
        "used_gpu_hours": 0.0,
        "idle_gpu_hours": 0.0,
        "idle_share": None,
        "unreserved_gpu_hours": 0.5,
        "violations_caused": 1,
        "violations_suffered": 0,
        "jobs": 0,
    }
    assert answer.body["totals"]["reserved_gpu_hours"] == 3.0
    assert answer.body["user"] is None


async def test_groups_hosts_and_models(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    by_group = _rows((await admin.get("/reports/usage", by="group")).body)
    assert by_group["ml"]["reserved_gpu_hours"] == 2.0
    assert by_group["users"]["reserved_gpu_hours"] == 3.0  # the default group: both
    assert by_group["users"]["violations_caused"] == 1
    by_model = _rows((await admin.get("/reports/usage", by="gpu_model")).body)
    assert by_model[MODEL]["reserved_gpu_hours"] == 3.0
    assert by_model[MODEL]["jobs"] == 1
    by_host = _rows((await admin.get("/reports/usage", by="host")).body)
    assert by_host["rack1"]["unreserved_gpu_hours"] == 1.5


async def test_a_user_sees_only_their_own(system: ApiSystem) -> None:
    bob = await system.as_user("bob")
    answer = await bob.get("/reports/usage", by="user")
    assert answer.status == 200, answer.body
    assert list(_rows(answer.body)) == ["bob"]
    assert answer.body["totals"]["reserved_gpu_hours"] == 1.0
    by_host = await bob.get("/reports/usage", by="host")
    assert by_host.body["totals"]["violations_suffered"] == 0  # alice's, not his
    assert (await bob.get("/reports/usage", user="bob")).status == 200
    refused = await bob.get("/reports/usage", user="alice")
    assert refused.status == 403, refused.body
    assert refused.body["error"] == "forbidden"
    assert (await bob.get("/reports/usage.csv", user="alice")).status == 403
    assert (await system.anonymous().get("/reports/usage")).status == 401
    admin = await system.as_user("admin")
    only_alice = await admin.get("/reports/usage", user="alice")
    assert list(_rows(only_alice.body)) == ["alice"]


async def test_csv_parses_back_to_the_same_figures(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    answer = await admin.get("/reports/usage.csv", by="user")
    assert answer.status == 200
    assert answer.headers["Content-Type"].startswith("text/csv")
    assert "attachment" in answer.headers["Content-Disposition"]
    parsed = {row["user"]: row for row in csv.DictReader(io.StringIO(answer.body))}
    assert float(parsed["alice"]["used_gpu_hours"]) == 1.5
    assert parsed["bob"]["idle_share"] == ""
    assert float(parsed["total"]["reserved_gpu_hours"]) == 3.0
    same = await admin.get("/reports/usage", by="user", format="csv")
    assert same.body == answer.body


@pytest.mark.parametrize(
    "params",
    [
        {"start": "2026-11-02", "end": "2026-11-01"},
        {"start": "2026-11-01", "end": "2026-11-01"},
        {"start": "2025-01-01", "end": "2026-11-01"},
        {"start": "yesterday"},
        {"by": "planet"},
    ],
)
async def test_a_bad_period_is_422(system: ApiSystem, params: dict[str, str]) -> None:
    admin = await system.as_user("admin")
    answer = await admin.get("/reports/usage", **params)
    assert answer.status == 422, answer.body
    assert answer.body["error"] == "validation_failed"


async def test_a_period_before_the_seeded_day_is_empty(system: ApiSystem) -> None:
    admin = await system.as_user("admin")
    answer = await admin.get("/reports/usage", start="2020-01-01", end="2020-02-01")
    assert answer.status == 200
    assert answer.body["rows"] == []
    assert answer.body["totals"]["reserved_gpu_hours"] == 0.0


# --- the CLI -----------------------------------------------------------------------------------


@pytest.fixture
def cli(
    system: ApiSystem,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> Cli:
    return Cli(system, tmp_path, monkeypatch, capsys)


async def test_the_cli_prints_a_table_and_csv(cli: Cli) -> None:
    await cli.login("admin")
    ran = await cli("report", "--by", "user")
    assert ran.code == 0, ran
    assert "alice" in ran.out and "bob" in ran.out and "25%" in ran.out
    ran = await cli("report", "--by", "host", "--csv")
    assert ran.code == 0, ran
    parsed = list(csv.DictReader(io.StringIO(ran.out)))
    assert [row["host"] for row in parsed] == ["rack1", "total"]
    assert float(parsed[0]["reserved_gpu_hours"]) == 3.0
    assert float(parsed[0]["unreserved_gpu_hours"]) == 1.5


async def test_the_cli_shows_a_user_only_their_own(cli: Cli) -> None:
    await cli.login("alice")
    ran = await cli("report", "--json")
    assert ran.code == 0, ran
    assert [row["key"] for row in ran.json()["rows"]] == ["alice"]
    refused = await cli("report", "--user", "bob")
    assert refused.code == 1
    assert "admins" in refused.err
    bad = await cli("report", "--start", "2026-11-02", "--end", "2026-11-01")
    assert bad.code == 1
    assert "after start" in bad.err
