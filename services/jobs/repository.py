"""Reading and writing jobs, their tasks and runs (SQL; no rules here)."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from sqlalchemy import delete, insert, select, update
from sqlalchemy.ext.asyncio import AsyncConnection

from services.jobs.spec import from_spec, spec_json
from services.jobs.state import JobState, TaskRun
from services.jobs.tables import jobs, runs, tasks
from services.shared.storage.store import from_ms, iso_ms, to_ms


def _ms(moment: datetime | None) -> int | None:
    return None if moment is None else to_ms(moment)


def _time(ms: int | None) -> datetime | None:
    return None if ms is None else from_ms(ms)


def _job_values(state: JobState) -> dict[str, Any]:
    return {
        "owner": state.owner,
        "name": state.job.name,
        "description": state.job.description,
        "spec": spec_json(state.job),
        "status": state.status,
        "queued": state.queued,
        "enqueued_at_ms": _ms(state.enqueued_at),
        "start_at_ms": _ms(state.start_at),
        "stop_at_ms": _ms(state.stop_at),
        "reservation_id": state.reservation_id,
        "max_runtime_s": state.max_runtime_s,
        "from_queue": state.from_queue,
        "stop_requested_at_ms": _ms(state.stop_requested_at),
        "stop_reason": state.stop_reason,
        "signals_sent": ",".join(sorted(state.signals_sent)),
        "interrupted_for": json.dumps(sorted(state.interrupted_for)),
        "waiting_reason": state.waiting_reason,
        "interruptions": state.interruptions,
        "time_limit_told": state.time_limit_told,
        "failure": state.failure,
        "failure_reason": state.failure_reason,
        "created_at_ms": to_ms(state.created_at),
        "updated_at_ms": to_ms(state.updated_at),
    }


def _task_values(run: TaskRun) -> dict[str, Any]:
    return {
        "status": run.status,
        "run": run.run,
        "host": run.host,
        "gpus": json.dumps(list(run.gpus)),
        "port": run.port,
        "pid": run.pid,
        "started_at_ms": _ms(run.started_at),
        "ended_at_ms": _ms(run.ended_at),
        "exit_code": run.exit_code,
        "reason": run.reason,
        "last_seen_at_ms": _ms(run.last_seen_at),
    }


async def insert_job(conn: AsyncConnection, state: JobState) -> int:
    """Insert the job (its id is chosen by the database) and its tasks; returns the id."""
    found = await conn.execute(insert(jobs).values(_job_values(state)).returning(jobs.c.id))
    job_id = int(found.scalar_one())
    await conn.execute(
        insert(tasks),
        [
            {"job_id": job_id, "task_index": i, **_task_values(run)}
            for i, run in enumerate(state.tasks)
        ],
    )
    return job_id


async def save_job(conn: AsyncConnection, state: JobState, *, tasks_changed: bool = True) -> None:
    """Write the job row and (when the task list may have changed) all its task rows."""
    await conn.execute(update(jobs).where(jobs.c.id == state.id).values(_job_values(state)))
    if tasks_changed:
        await conn.execute(delete(tasks).where(tasks.c.job_id == state.id))
        await conn.execute(
            insert(tasks),
            [
                {"job_id": state.id, "task_index": i, **_task_values(run)}
                for i, run in enumerate(state.tasks)
            ],
        )


async def save_task(conn: AsyncConnection, state: JobState, index: int) -> None:
    await conn.execute(
        update(tasks)
        .where(tasks.c.job_id == state.id, tasks.c.task_index == index)
        .values(_task_values(state.tasks[index]))
    )
    await conn.execute(
        update(jobs)
        .where(jobs.c.id == state.id)
        .values(status=state.status, updated_at_ms=to_ms(state.updated_at))
    )


async def record_run(conn: AsyncConnection, state: JobState, index: int) -> None:
    """Keep an ended run in the task's history."""
    run = state.tasks[index]
    await conn.execute(
        insert(runs).values(
            job_id=state.id,
            task_index=index,
            run=run.run,
            host=run.host,
            gpus=json.dumps(list(run.gpus)),
            status=run.status,
            exit_code=run.exit_code,
            reason=run.reason,
            started_at_ms=_ms(run.started_at),
            ended_at_ms=_ms(run.ended_at),
        )
    )


async def delete_job(conn: AsyncConnection, job_id: int) -> None:
    await conn.execute(delete(runs).where(runs.c.job_id == job_id))
    await conn.execute(delete(tasks).where(tasks.c.job_id == job_id))
    await conn.execute(delete(jobs).where(jobs.c.id == job_id))


async def load_jobs(conn: AsyncConnection) -> list[JobState]:
    by_job: dict[int, list[Any]] = {}
    for row in await conn.execute(select(tasks).order_by(tasks.c.job_id, tasks.c.task_index)):
        by_job.setdefault(row.job_id, []).append(row)
    loaded = []
    for row in await conn.execute(select(jobs).order_by(jobs.c.id)):
        job = from_spec(row.id, row.owner, row.name, row.description, row.spec)
        loaded.append(
            JobState(
                job=job,
                created_at=from_ms(row.created_at_ms),
                updated_at=from_ms(row.updated_at_ms),
                tasks=[_task_run(t) for t in by_job.get(row.id, [])],
                status=row.status,
                queued=bool(row.queued),
                enqueued_at=_time(row.enqueued_at_ms),
                start_at=_time(row.start_at_ms),
                stop_at=_time(row.stop_at_ms),
                reservation_id=row.reservation_id,
                max_runtime_s=row.max_runtime_s,
                from_queue=bool(row.from_queue),
                stop_requested_at=_time(row.stop_requested_at_ms),
                stop_reason=row.stop_reason,
                signals_sent=set(filter(None, (row.signals_sent or "").split(","))),
                interrupted_for=set(json.loads(row.interrupted_for)),
                waiting_reason=row.waiting_reason,
                interruptions=row.interruptions,
                time_limit_told=bool(row.time_limit_told),
                failure=row.failure,
                failure_reason=row.failure_reason,
            )
        )
    return loaded


def _task_run(row: Any) -> TaskRun:
    return TaskRun(
        status=row.status,
        run=row.run,
        host=row.host,
        gpus=tuple(json.loads(row.gpus)),
        port=row.port,
        pid=row.pid,
        started_at=_time(row.started_at_ms),
        ended_at=_time(row.ended_at_ms),
        exit_code=row.exit_code,
        reason=row.reason,
        last_seen_at=_time(row.last_seen_at_ms),
    )


async def task_runs(conn: AsyncConnection, job_id: int) -> list[dict[str, Any]]:
    """The history of a job's task runs, oldest first."""
    found = await conn.execute(
        select(runs).where(runs.c.job_id == job_id).order_by(runs.c.task_index, runs.c.run)
    )
    return [
        {
            "task": row.task_index,
            "run": row.run,
            "host": row.host,
            "gpus": json.loads(row.gpus),
            "status": row.status,
            "exit_code": row.exit_code,
            "reason": row.reason,
            "started_at": iso_ms(row.started_at_ms),
            "ended_at": iso_ms(row.ended_at_ms),
        }
        for row in found
    ]
