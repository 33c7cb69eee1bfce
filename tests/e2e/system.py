"""What the end-to-end tests that run every service against the simulated fleet share:
TOML values for their config, migrated databases with the accounts admin, alice and bob, and
waiting until the monitor's GPUs reached the reservations service."""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from typing import Any

from services.reservations import accounts
from services.reservations.store import Store
from services.shared import db
from services.shared.bus import Bus
from services.shared.config import Settings
from tests.support.polling import until

DEADLINE_S = 30.0
USERS = (("admin", True), ("alice", False), ("bob", False))


def toml(value: Any) -> str:
    """A TOML value: JSON strings, numbers and arrays are valid TOML."""
    return json.dumps(value)


async def create_accounts(settings: Settings) -> None:
    """Migrate every service's database; admin, alice and bob (e-mail user@lab.example)."""
    for name in db.SERVICES_WITH_DATABASE:
        engine = db.create_engine(settings.storage.database_url_for(name))
        try:
            await db.upgrade(engine, name)
            if name == "reservations":
                async with Store(engine).write() as conn:
                    for user, admin in USERS:
                        await accounts.create_user(
                            conn,
                            username=user,
                            email=f"{user}@lab.example",
                            password="pw-12345678",
                            is_admin=admin,
                            actor="test",
                        )
        finally:
            await engine.dispose()


async def discovered_gpu(bus: Bus, host: str, index: int) -> dict[str, Any]:
    """GPU `index` of `host` (uuid, host, index, ...) once the reservations service knows it."""

    async def known() -> dict[str, Any] | None:
        with contextlib.suppress(Exception):
            for gpu in await bus.call("reservations", "list_gpus", {}):
                if gpu["host"] == host and gpu["index"] == index:
                    return dict(gpu)
        return None

    what = f"GPU {index} of {host} reaching the reservations service"
    return await until(known, what, DEADLINE_S, interval=0.2)


async def stopped(running: asyncio.Task[None], deadline_s: float = 60.0) -> None:
    """Wait for `run_services` to return after its stop event; if it does not within the
    deadline, print where every other task is stuck before failing (a rare teardown hang,
    not reproduced on demand, is otherwise a bare TimeoutError)."""
    try:
        await asyncio.wait_for(asyncio.shield(running), deadline_s)
    except TimeoutError:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                print(f"still running at teardown: {task!r}", file=sys.stderr)
                task.print_stack(limit=8, file=sys.stderr)
        running.cancel()
        raise
