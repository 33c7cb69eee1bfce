"""Composition root of the monitor service."""

from contextlib import AsyncExitStack

from services.monitor.handlers import EVENT_HANDLERS, RPC_METHODS
from services.shared.bus import Teardown
from services.shared.runtime import ServiceContext, open_database, start_service


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        await open_database(ctx, stack)
        return await start_service(ctx, stack, RPC_METHODS, EVENT_HANDLERS)
    except BaseException:
        await stack.aclose()
        raise
