"""The `bus` fixture of unit tests: a started in-process bus, closed after the test.

Registered for every test by tests/conftest.py; a test module that needs another bus (the
contract suite's, over RabbitMQ too) defines its own `bus`, which wins.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from services.shared.bus.inproc import InProcessBus


@pytest.fixture
async def bus() -> AsyncIterator[InProcessBus]:
    bus = InProcessBus()
    await bus.start()
    try:
        yield bus
    finally:
        await bus.close()
