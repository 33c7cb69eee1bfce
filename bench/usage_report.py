"""How long a usage report takes for a year of a 100-GPU lab with 100 users, end to end.

Usage::

    .venv/bin/python bench/usage_report.py [--quick]

Set-up, in a temporary folder removed at the end:

- warden.toml: storage in the folder (embedded SQLite), a free `[gateway] port`, no hosts.
  Every database migrated with `services.shared.storage.db.upgrade`; the accounts user000..user099
  and admin made by `accounts.create_user`; 10 groups of 10 users (each user also in the
  default group "users").
- A year before now, seeded straight into the SQLite files (sqlite3 `executemany`, seconds):
  100 GPUs (25 hosts x 4, half A100, half H100); on each GPU one booking after another, 2-24 h
  long with 0-24 h gaps (about 55 % of the year booked; --quick: 30 days), each with usage
  totals as the reservations service keeps them (720 samples per hour of the booking, 0-100 %
  of them idle); an incident on a booked GPU for 1 booking in 20 (30 min to 3 h, by another
  user); a finished job run for 1 booking in 10 and as many on no reservation (1-8 h, 1-2 GPUs).
- Every service and the gateway in this process on the in-process bus, as `warden run all`
  runs them (`services.shared.runtime.run_services`).

Measurement: `GET /api/v1/reports/usage?start=<a year ago>&end=<now>&by=user` as admin, 10 times
after 2 warm-up calls (--quick: 3), each timed with time.perf_counter from sending to the end of
reading the body (three RPCs to the services, each reading and adding up its rows, then the
gateway's grouping); then 3 times each of by=group, by=host, by=gpu_model and the CSV. Target:
p50 < 2 s for by=user. The last line is machine-readable:
`RESULT users=100 days=365 report_p50_ms=<n> report_p99_ms=<n>` (by=user).
"""

from __future__ import annotations

import asyncio
import json
import random
import shutil
import sqlite3
import tempfile
import time
from pathlib import Path
from typing import Any

import _common as common
import aiohttp

from services.shared.config import load_settings
from services.shared.runtime import run_services

USERS = [f"user{i:03d}" for i in range(100)]
ADMIN = "admin"
PASSWORD = "bench-password-1"
HOSTS = [f"node{i:02d}" for i in range(25)]
GPUS_PER_HOST = 4
MODELS = ("NVIDIA A100-SXM4-80GB", "NVIDIA H100 80GB HBM3")
HOUR_MS = 3_600_000
DAY_MS = 24 * HOUR_MS
SAMPLES_PER_HOUR = 720  # one host sample every 5 s
SERVICES = ["monitor", "reservations", "jobs", "violations", "gateway"]
TARGET_MS = 2000.0


def _sqlite_path(settings: Any, service: str) -> str:
    url = settings.storage.database_url_for(service)
    return url.split(":///", 1)[1]


def seed(settings: Any, now_ms: int, days: int, rng: random.Random) -> dict[str, int]:
    """The year, straight into the three services' SQLite files; what was written."""
    start_ms = now_ms - days * DAY_MS
    gpus = [
        (f"GPU-bench-{h:02d}-{i}", host, i, MODELS[h % 2])
        for h, host in enumerate(HOSTS)
        for i in range(GPUS_PER_HOST)
    ]
    bookings: list[tuple[Any, ...]] = []
    slots: list[tuple[Any, ...]] = []
    incidents: list[tuple[Any, ...]] = []
    jobs: list[tuple[Any, ...]] = []
    runs: list[tuple[Any, ...]] = []
    rid = 0
    for uuid, host, index, _model in gpus:
        at = start_ms + rng.randrange(0, DAY_MS)
        while True:
            length = rng.randrange(2, 25) * HOUR_MS
            if at + length > now_ms:
                break
            rid += 1
            owner = rng.choice(USERS)
            samples = SAMPLES_PER_HOUR * length // HOUR_MS
            usage = {
                "totals": {
                    "gpu_samples": samples,
                    "util_sum": samples * 40.0,
                    "idle_samples": int(samples * rng.random()),
                },
                "last_ms": {},
            }
            bookings.append(
                (
                    rid,
                    owner,
                    "bench",
                    "",
                    at,
                    at + length,
                    "active",
                    owner,
                    at - HOUR_MS,
                    at - HOUR_MS,
                    False,
                    at,
                    at + length,
                    json.dumps(usage),
                )
            )
            slots.append((rid, uuid, owner, at, at + length, True))
            if rid % 20 == 0:
                offender = rng.choice([u for u in USERS if u != owner])
                since = at + rng.randrange(0, length // 2)
                until = since + rng.randrange(HOUR_MS // 2, 3 * HOUR_MS)
                incidents.append(
                    (
                        f"bench-{rid}",
                        host,
                        uuid,
                        index,
                        offender,
                        "reservations",
                        rid,
                        owner,
                        at,
                        at + length,
                        since,
                        since,
                        until,
                        until,
                        "gone",
                        "[]",
                        "[]",
                    )
                )
            for inside in (True, False) if rid % 10 == 0 else ():
                job_id = len(jobs) + 1
                ran = rng.randrange(1, 9) * HOUR_MS
                started = at if inside else at + length + rng.randrange(0, HOUR_MS)
                used = [uuid] if rng.random() < 0.7 else [uuid, f"GPU-bench-{(rid % 25):02d}-0"]
                task = {
                    "host": host,
                    "command": "python train.py",
                    "gpus": used,
                    "gpu_count": None,
                    "cwd": "",
                    "params": [],
                    "env": {},
                    "role": "worker",
                }
                spec = json.dumps({"params": [], "env": {}, "template": None, "tasks": [task]})
                jobs.append(
                    (
                        job_id,
                        owner,
                        "train",
                        "",
                        spec,
                        "succeeded",
                        False,
                        rid if inside else None,
                        not inside,
                        "[]",
                        started - HOUR_MS,
                        started + ran,
                    )
                )
                runs.append(
                    (job_id, 0, 1, host, json.dumps(used), "succeeded", 0, started, started + ran)
                )
            at += length + rng.randrange(0, 25) * HOUR_MS

    with sqlite3.connect(_sqlite_path(settings, "reservations")) as conn:
        conn.executemany(
            "INSERT INTO reservations_gpus (uuid, host, gpu_index, name, memory_total_mib, "
            "present, first_seen_ms, last_change_ms) VALUES (?, ?, ?, ?, 81920, 1, ?, ?)",
            [(*gpu, start_ms, start_ms) for gpu in gpus],
        )
        conn.executemany(
            "INSERT INTO reservations (id, owner, title, description, start_ms, end_ms, status, "
            "created_by, created_at_ms, updated_at_ms, cancelled_by_rules, started_event_ms, "
            "ended_event_ms, usage) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            bookings,
        )
        conn.executemany(
            "INSERT INTO reservations_gpu_slots (reservation_id, gpu_uuid, owner, start_ms, "
            "end_ms, active) VALUES (?, ?, ?, ?, ?, ?)",
            slots,
        )
        ids = dict(conn.execute("SELECT username, id FROM reservations_users"))
        for g in range(10):
            group_id = 100 + g
            conn.execute(
                "INSERT INTO reservations_groups (id, name, description, is_default, "
                "created_at_ms) VALUES (?, ?, '', 0, ?)",
                (group_id, f"lab{g}", start_ms),
            )
            conn.executemany(
                "INSERT INTO reservations_group_members (group_id, user_id) VALUES (?, ?)",
                [(group_id, ids[user]) for user in USERS[g * 10 : g * 10 + 10]],
            )
    with sqlite3.connect(_sqlite_path(settings, "violations")) as conn:
        conn.executemany(
            "INSERT INTO violations_incidents (id, host, gpu_uuid, gpu_index, offender, mode, "
            "reservation_id, owner, reservation_start_ms, reservation_end_ms, opened_at_ms, "
            "since_ms, last_seen_at_ms, resolved_at_ms, resolve_reason, processes, steps) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            incidents,
        )
    with sqlite3.connect(_sqlite_path(settings, "jobs")) as conn:
        conn.executemany(
            "INSERT INTO jobs_jobs (id, owner, name, description, spec, status, queued, "
            "reservation_id, from_queue, interrupted_for, created_at_ms, updated_at_ms) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            jobs,
        )
        conn.executemany(
            "INSERT INTO jobs_tasks (job_id, task_index, run, host, gpus, status, exit_code, "
            "started_at_ms, ended_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7], r[8]) for r in runs],
        )
        conn.executemany(
            "INSERT INTO jobs_runs (job_id, task_index, run, host, gpus, status, exit_code, "
            "started_at_ms, ended_at_ms) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            runs,
        )
    return {"reservations": len(bookings), "incidents": len(incidents), "jobs": len(jobs)}


async def wait_for(session: aiohttp.ClientSession, url: str, stopped: asyncio.Task[Any]) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if stopped.done():
            stopped.result()
        try:
            async with session.get(url) as response:
                if response.status == 200:
                    return
        except aiohttp.ClientError:
            pass
        await asyncio.sleep(0.2)
    raise RuntimeError(f"{url} did not answer 200 within 120 s")


async def timed(
    session: aiohttp.ClientSession, url: str, params: dict[str, str], token: str
) -> tuple[float, Any]:
    started = time.perf_counter()
    async with session.get(url, params=params, headers={"Authorization": f"Bearer {token}"}) as r:
        body = await r.text()
        if r.status != 200:
            raise RuntimeError(f"GET {url} {params}: {r.status} {body[:300]}")
    return (time.perf_counter() - started) * 1000, body


async def main(quick: bool) -> None:
    days = 30 if quick else 365
    runs = 3 if quick else 10
    folder = Path(tempfile.mkdtemp(prefix="warden-bench-usage-"))
    try:
        port = common.free_port()
        known_hosts = folder / "known_hosts"
        known_hosts.touch()
        config = common.write_config(
            folder,
            known_hosts=known_hosts,
            hosts=[],
            gateway={"port": port, "frontend_dir": str(folder / "no-frontend")},
        )
        settings = load_settings(config, environ={"HOME": str(folder)})
        await common.prepare_databases(
            settings, [(user, False) for user in USERS] + [(ADMIN, True)], PASSWORD
        )
        now_ms = int(time.time() * 1000)
        seeding = time.perf_counter()
        written = seed(settings, now_ms, days, random.Random(20))
        seed_s = time.perf_counter() - seeding
        stop = asyncio.Event()
        services = asyncio.create_task(
            run_services(SERVICES, settings, bus_kind="inproc", stop=stop)
        )
        base = f"http://127.0.0.1:{port}/api/v1"
        try:
            async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
                await wait_for(session, base + "/health", services)
                async with session.post(
                    base + "/session", json={"username": ADMIN, "password": PASSWORD}
                ) as answer:
                    token = (await answer.json())["access_token"]
                url = base + "/reports/usage"
                period = {
                    "start": time.strftime(
                        "%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ms / 1000 - days * 86400)
                    ),
                    "end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now_ms / 1000)),
                }
                for _ in range(2):
                    await timed(session, url, {**period, "by": "user"}, token)
                figures: dict[str, common.Latencies] = {}
                rows: dict[str, int] = {}
                plan = [("user", {"by": "user"}, runs)] + [
                    (by, {"by": by}, 3) for by in ("group", "host", "gpu_model")
                ]
                plan.append(("user, CSV", {"by": "user", "format": "csv"}, 3))
                for label, params, count in plan:
                    figures[label] = common.Latencies()
                    for _ in range(count):
                        ms, body = await timed(session, url, {**period, **params}, token)
                        figures[label].samples_ms.append(ms)
                    if params.get("format") != "csv":
                        rows[label] = len(json.loads(body)["rows"])
                    else:
                        rows[label] = body.count("\n") - 2
        finally:
            stop.set()
            await services
    finally:
        shutil.rmtree(folder, ignore_errors=True)

    print(
        f"usage report: {len(USERS)} users, {len(HOSTS) * GPUS_PER_HOST} GPUs, {days} days: "
        f"{written['reservations']:,} reservations, {written['incidents']:,} incidents, "
        f"{written['jobs']:,} jobs (seeded in {seed_s:.1f} s)\n"
    )
    common.print_table(
        ("by", "runs", "rows", "p50 ms", "p99 ms", "max ms"),
        [
            (
                label,
                str(lat.count),
                str(rows[label]),
                f"{lat.p50:.0f}",
                f"{lat.p99:.0f}",
                f"{lat.max:.0f}",
            )
            for label, lat in figures.items()
        ],
        "<>>>>>",
    )
    user = figures["user"]
    met = common.verdict(user.p50 < TARGET_MS, user.p50)
    print(f"\ntarget: by=user p50 < {TARGET_MS:.0f} ms: {met}")
    common.print_machine(sharing="other work on this machine counts in the figures")
    common.print_result(
        users=len(USERS),
        days=days,
        report_p50_ms=f"{user.p50:.0f}",
        report_p99_ms=f"{user.p99:.0f}",
    )


if __name__ == "__main__":
    parser = common.argument_parser(__doc__, "30 days, 3 runs")
    options = parser.parse_args()
    common.run_async(main(options.quick), "the temporary folder was removed")
