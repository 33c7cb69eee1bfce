"""Composition root of the gateway: the HTTP server in front of the other services."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from contextlib import AsyncExitStack

from aiohttp import web

from services import SERVICE_NAMES
from services.gateway import setup_link
from services.gateway.app import create_app
from services.gateway.bad_http import server_logger
from services.shared.bus import Teardown
from services.shared.errors import ConfigError
from services.shared.memory import keep_large_blocks_mapped
from services.shared.metrics import Sample
from services.shared.runtime import ServiceContext, start_service

log = logging.getLogger("warden.gateway")


async def start(ctx: ServiceContext) -> Teardown:
    stack = AsyncExitStack()
    try:
        # Every service's replicas, heard through their heartbeats: health lists them.
        await ctx.replicas.watch(*SERVICE_NAMES)
        stack.push_async_callback(ctx.replicas.stop)  # its queues, should the start fail

        async def live() -> list[Sample]:
            return [
                ("warden_replicas_live", {"of": name}, float(len(ctx.replicas.live(name))))
                for name in SERVICE_NAMES
            ]

        stack.push_async_callback(ctx.metered.add_probe(live))
        keep_large_blocks_mapped()  # request bodies of up to 1 MiB: given back once answered
        app = create_app(ctx.settings, ctx.bus, replicas=ctx.replicas)
        runner = web.AppRunner(app, access_log=None, logger=server_logger())
        await runner.setup()
        stack.push_async_callback(runner.cleanup)
        host, port = ctx.settings.gateway.host, ctx.settings.gateway.port
        site = web.TCPSite(runner, host, port)
        try:
            await site.start()
        except OSError as err:
            raise ConfigError(
                f"the gateway cannot listen on {host}:{port}: {err.strerror or err} "
                "(is another Warden or program using it? set gateway.port)",
                {"gateway.port": err.strerror or str(err)},
            ) from err
        bound = _bound_port(site) or port
        log.info("gateway listening on http://%s:%d", host, bound)
        # The first run: the set-up link, once the reservations service says no admin exists.
        announcing = asyncio.create_task(setup_link.announce(ctx.bus, host, bound))
        announcing.add_done_callback(_report_failure)
        stack.push_async_callback(_cancel, announcing)
        return await start_service(ctx, stack, {})
    except BaseException:
        await stack.aclose()
        raise


async def _cancel(task: asyncio.Task[bool]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError, Exception):
        await task


def _report_failure(task: asyncio.Task[bool]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.error("the set-up link could not be issued", exc_info=task.exception())


def _bound_port(site: web.TCPSite) -> int | None:
    server = site._server  # aiohttp exposes the bound socket only here (port 0 = any)
    sockets = getattr(server, "sockets", None) or []
    return int(sockets[0].getsockname()[1]) if sockets else None
