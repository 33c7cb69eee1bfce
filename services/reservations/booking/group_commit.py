"""Group commit: concurrent writes share one transaction, one after the other on one connection.

Each job runs inside the shared transaction and answers with a function that gives its result
(or raises its refusal) once the batch is done; it may leave its writes to `finish`, which
writes what the jobs left (each in its own SAVEPOINT, so a constraint violation undoes that one
alone). One drain task runs the batches, so a write pays BEGIN, the version check and COMMIT
once per batch instead of once per request, and on SQLite holds the write lock only while it
works. On SQLite a batch runs on the event loop's thread (`Store.write(on_loop=True)`): it
makes no trip to aiosqlite's thread, whose answers wait behind everything the loop has queued.

Answers reach their callers after the COMMIT; if the transaction fails, every job of the batch
gets that error (none of them happened).

A refusal (a WardenError: most answers under load are conflicts) reaches its caller without
the frames it was raised in. Its traceback would hold this writer's frame, and so the batch,
its futures and every request in it, in a reference cycle: garbage only the collector can free,
~40 objects per create, whose collections paused the loop for up to 20 ms.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.store import Store
from services.shared.errors import WardenError

Answer = Callable[[], Any]
Job = Callable[[AsyncConnection], Awaitable[Answer]]
# First thing in each transaction, given what the batch's jobs were submitted with.
Prepare = Callable[[AsyncConnection, list[Any]], Awaitable[None]]
Finish = Callable[[AsyncConnection], Awaitable[bool]]

# At most this many jobs share a transaction (a bound on how long the write lock is held).
MAX_BATCH = 128


class GroupWriter:
    def __init__(
        self,
        store: Store,
        *,
        prepare: Prepare,
        finish: Finish,
        on_commit: Callable[[], None],
        on_failure: Callable[[], None],
    ) -> None:
        self.store = store
        self.prepare = prepare  # first thing in each transaction (the version check, locks)
        # Last thing before the COMMIT (the writes the jobs left); True when anything was written.
        self.finish = finish
        self.on_commit = on_commit  # after a batch that wrote something (wakes the outbox relay)
        self.on_failure = on_failure  # a batch's transaction failed (forget what it wrote)
        self._waiting: list[tuple[Job, Any, asyncio.Future[Any]]] = []
        self._drain: asyncio.Task[None] | None = None

    async def submit(self, job: Job, about: Any = None) -> Any:
        """Run `job` in the next batch; its answer once that batch committed. `about` goes to
        `prepare` with those of the other jobs of the batch."""
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting.append((job, about, future))
        if self._drain is None or self._drain.done():
            self._drain = asyncio.create_task(self._run(), name="reservations group commit")
        try:
            return await future
        finally:
            del future  # a raised answer's traceback holds this frame; the future holds it

    async def _run(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting[:MAX_BATCH], self._waiting[MAX_BATCH:]
            answers: list[tuple[asyncio.Future[Any], Answer | Exception]] = []
            wrote = False
            try:
                async with self.store.write(on_loop=True) as conn:
                    await self.prepare(conn, [about for _job, about, _future in batch])
                    for job, _about, future in batch:
                        try:
                            answers.append((future, await job(conn)))
                        except Exception as err:  # this job's refusal: the others go on
                            answers.append((future, _untied(err)))
                    wrote = await self.finish(conn)
            except BaseException as err:
                self.on_failure()
                for _job, _about, future in batch:
                    if future.done():
                        continue
                    if isinstance(err, Exception):
                        future.set_exception(err)
                    else:  # the service stops
                        future.cancel()
                if not isinstance(err, Exception):
                    raise
                continue
            if wrote:
                self.on_commit()
            _deliver(answers)

    async def close(self) -> None:
        if self._drain is not None:
            with contextlib.suppress(Exception):
                await self._drain


def _deliver(answers: list[tuple[asyncio.Future[Any], Answer | Exception]]) -> None:
    for future, answer in answers:
        if future.done():  # the caller gave up (cancelled): its job was done all same
            continue
        if isinstance(answer, Exception):
            future.set_exception(answer)
            continue
        try:
            future.set_result(answer())
        except Exception as err:
            future.set_exception(_untied(err))


def _untied(err: Exception) -> Exception:
    """A refusal without the frames it passed through (see the module's docstring); anything
    else keeps them: a bug's traceback is worth its garbage."""
    return err.with_traceback(None) if isinstance(err, WardenError) else err
