"""Group commit on a real SQLite file: each job's answer or refusal reaches its own caller, and
refusals leave nothing that only the garbage collector can free (its pauses stop the loop)."""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sqlalchemy.ext.asyncio import AsyncConnection

from services.reservations.booking.group_commit import Answer, GroupWriter
from services.shared.errors import ReservationConflict
from services.shared.storage import db
from services.shared.storage.store import Store


async def _nothing_to_prepare(_conn: AsyncConnection, _about: list[Any]) -> None:
    return None


async def _nothing_written(_conn: AsyncConnection) -> bool:
    return False


def _writer(path: Path) -> GroupWriter:
    return GroupWriter(
        Store(db.create_engine(f"sqlite+aiosqlite:///{path}")),
        prepare=_nothing_to_prepare,
        finish=_nothing_written,
        on_commit=lambda: None,
        on_failure=lambda: None,
    )


async def _refuse(_conn: AsyncConnection) -> Answer:
    raise ReservationConflict("GPU-0 is taken", {"reasons": []})


async def _accept(_conn: AsyncConnection) -> Answer:
    return lambda: "booked"


async def _refuse_later(_conn: AsyncConnection) -> Answer:
    def answer() -> Any:  # as a create the database refused at the batch's end
        raise ReservationConflict("GPU-1 was taken meanwhile", {"reasons": []})

    return answer


@contextlib.contextmanager
def _cyclic_garbage() -> Iterator[list[Any]]:
    """What becomes garbage inside the block that only the collector can free (filled at the
    block's end)."""
    found: list[Any] = []
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


async def test_each_caller_gets_its_own_answer_or_refusal(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "db.sqlite")
    try:
        answers = await asyncio.gather(
            writer.submit(_accept),
            writer.submit(_refuse),
            writer.submit(_refuse_later),
            writer.submit(_accept),
            return_exceptions=True,
        )
        assert answers[0] == answers[3] == "booked"
        assert isinstance(answers[1], ReservationConflict)
        assert str(answers[1]) == "GPU-0 is taken"
        assert isinstance(answers[2], ReservationConflict)
        assert str(answers[2]) == "GPU-1 was taken meanwhile"
    finally:
        await writer.close()
        await writer.store.engine.dispose()


async def test_refusals_leave_no_cycles_for_the_garbage_collector(tmp_path: Path) -> None:
    writer = _writer(tmp_path / "db.sqlite")
    try:
        await writer.submit(_accept)  # the connection pool and statements made beforehand

        async def caller(job: Any) -> str:
            try:
                return str(await writer.submit(job))
            except ReservationConflict as refusal:
                return f"refused: {refusal}"

        with _cyclic_garbage() as garbage:
            answers = await asyncio.gather(
                *(caller(job) for job in [_refuse, _accept, _refuse_later] * 10)
            )
        assert answers[:3] == [
            "refused: GPU-0 is taken",
            "booked",
            "refused: GPU-1 was taken meanwhile",
        ]
        left = [o for o in garbage if isinstance(o, (ReservationConflict, asyncio.Future))]
        assert left == []
    finally:
        await writer.close()
        await writer.store.engine.dispose()
