"""Composition root of the violations service."""

from contextlib import AsyncExitStack

from services.shared.bus import Teardown
from services.shared.runtime import ServiceContext, open_database, start_service
from services.violations.handlers import EVENT_HANDLERS, RPC_METHODS


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        await open_database(ctx, stack)
        return await start_service(ctx, stack, RPC_METHODS, EVENT_HANDLERS)
    except BaseException:
        await stack.aclose()
        raise
