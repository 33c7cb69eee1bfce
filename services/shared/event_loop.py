"""The event loop `warden run` runs the services on: uvloop when it is installed (the
`uvloop` extra: `pip install 'gpu-warden[uvloop]'`), asyncio's own otherwise, or when the
environment says `WARDEN_UVLOOP=0`. uvloop's sockets and timers cost less CPU per message
and per request (bench/README.md, CHANGELOG.md); everything works the same without it.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def loop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's `new_event_loop` when it is installed and not turned off; else None."""
    if os.environ.get("WARDEN_UVLOOP", "1").strip().lower() in ("0", "false", "no", "off"):
        return None
    try:
        import uvloop
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_name() -> str:
    return "uvloop" if loop_factory() is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run(main)` on the loop `loop_factory` picks."""
    with asyncio.Runner(loop_factory=loop_factory()) as runner:
        return runner.run(main)
