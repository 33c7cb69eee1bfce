"""Conditional GETs for the reads clients poll (`GET /gpus`, calendar ranges): a strong ETag
and 304 Not Modified.

A tag is made from what the answer depends on, not from the answer's bytes, so that a poller
whose copy is current costs a few dictionary look-ups: the version of the gateway's read model
(the board's composition, the calendar copy's change counter for the GPUs asked about), what
the query picked, and who asks (user name and admin flag: two callers never share a tag, so a
304 never confirms to one what only another may see). A per-process epoch keeps the tags of
two gateway replicas, or of one before and after a restart, apart. Answers carry
`Cache-Control: no-cache`: a client may keep them but asks again every time.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Callable

from aiohttp import web

from services.gateway.auth import Caller

EPOCH = secrets.token_hex(8)
CACHE_CONTROL = "no-cache"


def make_tag(caller: Caller, *parts: object) -> str:
    """A strong ETag (quoted) for an answer to `caller` that depends on `parts` (reprs)."""
    text = repr((EPOCH, caller.username, caller.is_admin, parts)).encode()
    return '"' + hashlib.blake2b(text, digest_size=16).hexdigest() + '"'


def matches(request: web.Request, tag: str) -> bool:
    """Whether `If-None-Match` names `tag` (or is `*`). Weak comparison, as RFC 9110 asks for
    If-None-Match: `W/"x"` matches `"x"`."""
    header = request.headers.get("If-None-Match")
    if not header:
        return False
    for candidate in header.split(","):
        candidate = candidate.strip()
        if candidate == "*" or candidate.removeprefix("W/") == tag:
            return True
    return False


def conditional(
    request: web.Request, tag: str, body: Callable[[], bytes], *, charset: str | None = None
) -> web.Response:
    """304 when the client's copy is `tag`; else 200 with `body()` (JSON). Both with the tag."""
    headers = {"ETag": tag, "Cache-Control": CACHE_CONTROL}
    if matches(request, tag):
        return web.Response(status=304, headers=headers)
    return web.Response(
        body=body(), content_type="application/json", charset=charset, headers=headers
    )
