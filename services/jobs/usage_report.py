"""The jobs' part of a usage report: jobs run per owner, and GPU-hours of jobs that ran without
a reservation (queued jobs and jobs started on free GPUs).

A job counts once per period in which one of its task runs was running, on the host and first
GPU of the first such run. Ended runs are kept in `jobs_runs`; a running task is in
`jobs_tasks` until it ends (counted up to the end of the period).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncConnection

from services.jobs.tables import jobs, runs, tasks
from services.shared.usage_report import HOUR_MS, FactSum, overlap_ms

# (job_id, owner, reservation_id, host, gpu uuids, started_at_ms, ended_at_ms or None)
Run = tuple[int, str, int | None, str | None, list[str], int, int | None]


def job_facts(rows: Iterable[Run], start_ms: int, end_ms: int) -> list[dict[str, Any]]:
    found = FactSum()
    counted: set[int] = set()
    for job_id, owner, reservation_id, host, gpus, started, ended in sorted(
        rows, key=lambda run: run[5]
    ):
        ran_ms = overlap_ms(started, end_ms if ended is None else ended, start_ms, end_ms)
        if ran_ms <= 0 and not (start_ms <= started < end_ms):
            continue
        if job_id not in counted:
            counted.add(job_id)
            found.add(owner, host, gpus[0] if gpus else None, jobs=1)
        if reservation_id is None:
            for gpu_uuid in gpus:
                found.add(owner, host, gpu_uuid, unreserved_gpu_hours=ran_ms / HOUR_MS)
    return found.facts()


async def usage_report(conn: AsyncConnection, start_ms: int, end_ms: int) -> dict[str, Any]:
    ended = await conn.execute(
        select(
            runs.c.job_id,
            jobs.c.owner,
            jobs.c.reservation_id,
            runs.c.host,
            runs.c.gpus,
            runs.c.started_at_ms,
            runs.c.ended_at_ms,
        )
        .join(jobs, jobs.c.id == runs.c.job_id)
        .where(runs.c.started_at_ms < end_ms, runs.c.ended_at_ms >= start_ms)
    )
    running = await conn.execute(
        select(
            tasks.c.job_id,
            jobs.c.owner,
            jobs.c.reservation_id,
            tasks.c.host,
            tasks.c.gpus,
            tasks.c.started_at_ms,
            tasks.c.ended_at_ms,
        )
        .join(jobs, jobs.c.id == tasks.c.job_id)
        .where(tasks.c.started_at_ms < end_ms, tasks.c.ended_at_ms.is_(None))
    )
    found: list[Run] = [
        (row[0], row[1], row[2], row[3], list(json.loads(row[4] or "[]")), row[5], row[6])
        for result in (ended, running)
        for row in result
        if row[5] is not None
    ]
    return {"facts": job_facts(found, start_ms, end_ms)}
