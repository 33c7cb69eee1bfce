"""A real HTTP receiver for webhook tests: every JSON body posted to `path` is appended to
`received` (no access log: it would print the paths, which may hold a token)."""

from __future__ import annotations

from typing import Any

from aiohttp import web


async def webhook_receiver(received: list[dict[str, Any]], path: str) -> web.AppRunner:
    """Started on a free loopback port (`runner.addresses[0][1]`); `await runner.cleanup()`."""

    async def hook(request: web.Request) -> web.Response:
        received.append(await request.json())
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_post(path, hook)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    return runner
