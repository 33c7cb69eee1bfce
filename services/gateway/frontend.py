"""Serving the built web UI (`frontend/dist`) at `/`, with history-mode fallback, and the
built documentation site (`site/`, `make docs`) at `/docs/`, which the UI's Help menu links.

A path that names a file in the build is that file; any other path outside `/api/` is the
app's `index.html`, so that a deep link such as `/reservations/42` opens the app there. The
build's `assets/` have content hashes in their names: browsers may keep them for good. The
build writes a `.gz` beside each, which aiohttp sends to browsers that accept gzip.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from services.gateway.routing import API

# The build inside the package (an installed wheel: setup.py copies it there), else
# `frontend/dist` beside the code (a source checkout).
PACKAGED_DIST = Path(__file__).resolve().parent / "ui"
DEFAULT_DIST = Path(__file__).resolve().parents[2] / "frontend" / "dist"
# The documentation site as `make docs` builds it beside the code.
DEFAULT_SITE = Path(__file__).resolve().parents[2] / "site"
DOCS = "/docs"
IMMUTABLE = {"Cache-Control": "public, max-age=31536000, immutable"}


def dist_dir(configured: str, packaged: Path = PACKAGED_DIST) -> Path:
    if configured:
        return Path(configured)
    return packaged if (packaged / "index.html").is_file() else DEFAULT_DIST


# No file of a build has a longer path (the OS would refuse it with ENAMETOOLONG).
MAX_PATH = 1024


def _unservable(path: str) -> bool:
    """A path no file can have: NUL (the OS refuses it) or longer than any path may be."""
    return "\0" in path or len(path) > MAX_PATH or any(len(p) > 255 for p in path.split("/"))


def add_routes(app: web.Application, dist: Path) -> None:
    """Serve `dist` when it holds a build; without one, `/` says how to get one."""
    index = dist / "index.html"
    root = dist.resolve()

    async def serve(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        if request.path.startswith(API + "/") or request.path == API:
            raise web.HTTPNotFound()
        if not index.is_file():
            return web.Response(
                text="Warden's web UI is not built here (no frontend/dist). The API is at "
                f"{API}/, its documentation at {API}/docs.\n",
                content_type="text/plain",
            )
        if _unservable(path):  # the app's own routes: the page handles them
            return web.FileResponse(index, headers={"Cache-Control": "no-cache"})
        wanted = (root / path).resolve()
        if path and wanted.is_relative_to(root) and wanted.is_file():
            hashed = wanted.is_relative_to(root / "assets")
            return web.FileResponse(wanted, headers=IMMUTABLE if hashed else None)
        return web.FileResponse(index, headers={"Cache-Control": "no-cache"})

    app.router.add_get("/{path:.*}", serve)


def add_docs_routes(app: web.Application, site: Path = DEFAULT_SITE) -> None:
    """Serve the built documentation at /docs/ (a folder is its index.html, as mkdocs links
    them); without a build, /docs/ says where the documentation is."""
    root = site.resolve()

    async def serve(request: web.Request) -> web.StreamResponse:
        path = request.match_info["path"]
        if not (root / "index.html").is_file():
            return web.Response(
                text="Warden's documentation is not built here: `make docs` builds it into "
                "site/; its pages are also in docs/ of Warden's source.\n",
                content_type="text/plain",
            )
        if _unservable(path):
            raise web.HTTPNotFound()
        wanted = (root / path).resolve()
        if wanted.is_dir():
            wanted = wanted / "index.html"
        if not wanted.is_relative_to(root) or not wanted.is_file():
            raise web.HTTPNotFound()
        return web.FileResponse(wanted)

    async def to_folder(_request: web.Request) -> web.StreamResponse:
        raise web.HTTPFound(f"{DOCS}/")  # the pages' relative links need the slash

    app.router.add_get(DOCS, to_folder)
    app.router.add_get(DOCS + "/{path:.*}", serve)
