"""Waiting for something to happen: poll a condition until it holds, with a generous deadline.

Tests never sleep a fixed time hoping something happened, and never assert how long it took:
they wait with `until` and fail, naming what they waited for, only when even the deadline
passed (a hang, not a slow machine)::

    opened = await until(lambda: recorder.of("violation.opened"), "violation.opened")
    job = await until(job_in_state, "the job running", timeout=20)

`until_sync` is the same for code that runs outside an event loop (sync fixtures and tests).
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn, TypeVar

import pytest

T = TypeVar("T")

DEADLINE_S = 30.0
INTERVAL_S = 0.05


async def until(
    condition: Callable[[], T | Awaitable[T]],
    what: str,
    timeout: float = DEADLINE_S,
    *,
    interval: float = INTERVAL_S,
    report: Callable[[], object] | None = None,
) -> T:
    """Call `condition` (a function or a coroutine function) until its value is truthy and
    return that value; fail with `what` once `timeout` seconds passed without. `report`, if
    given, adds what helps to see why (logs, events so far) to that failure."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while True:
        found = condition()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return found
        if loop.time() > deadline:
            _fail(what, timeout, report)
        await asyncio.sleep(interval)


def until_sync(
    condition: Callable[[], T],
    what: str,
    timeout: float = DEADLINE_S,
    *,
    interval: float = INTERVAL_S,
    report: Callable[[], object] | None = None,
) -> T:
    """`until` for code outside an event loop: blocks between the calls of `condition`."""
    deadline = time.monotonic() + timeout
    while True:
        found = condition()
        if found:
            return found
        if time.monotonic() > deadline:
            _fail(what, timeout, report)
        time.sleep(interval)


def _fail(what: str, timeout: float, report: Callable[[], object] | None) -> NoReturn:
    message = f"{what}: not within {timeout:g}s"
    pytest.fail(f"{message}; {report()}" if report is not None else message)
