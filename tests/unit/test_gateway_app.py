"""What the gateway serves besides the API routes: its contract, the docs page (local assets),
the web UI with history fallback, and CORS. The app runs on aiohttp's TestServer; no backend
is needed for any of this."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import asyncssh
from aiohttp import web
from aiohttp.test_utils import TestClient, TestServer

from services.gateway.app import create_app
from services.shared.bus.inproc import InProcessBus
from services.shared.config import GatewaySettings, Settings, SshSettings

Client = TestClient[web.Request, web.Application]


def settings(**gateway: object) -> Settings:
    return Settings(gateway=GatewaySettings(**gateway), dev=True)  # type: ignore[arg-type]


async def test_the_contract_and_its_docs_page_are_served_with_local_assets(
    bus: InProcessBus,
) -> None:
    async with TestClient(TestServer(create_app(settings(frontend_dir="/nonexistent"), bus))) as c:
        document = await (await c.get("/api/v1/openapi.json")).json()
        assert document["info"]["title"] == "Warden API"
        assert "/api/v1/reservations" in document["paths"]
        page = await c.get("/api/v1/docs")
        html = await page.text()
        assert page.status == 200
        assert "/api/v1/openapi.json" in html
        assert "http" not in html.replace("http-equiv", "")  # nothing from a CDN
        script = await c.get("/api/v1/docs/static/swagger-ui-bundle.js")
        assert script.status == 200
        assert len(await script.read()) > 100_000


async def test_the_web_ui_is_served_with_history_fallback(
    bus: InProcessBus, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>app</html>")
    (dist / "assets" / "app.js").write_text("console.log('app')")
    (tmp_path / "secret.txt").write_text("not for you")
    async with TestClient(TestServer(create_app(settings(frontend_dir=str(dist)), bus))) as c:
        assert await (await c.get("/")).text() == "<html>app</html>"
        asset = await c.get("/assets/app.js")
        assert "console.log" in await asset.text()
        assert "immutable" in asset.headers["Cache-Control"]
        assert (await c.get("/")).headers["Cache-Control"] == "no-cache"
        deep = await c.get("/reservations/42")
        assert deep.status == 200
        assert await deep.text() == "<html>app</html>"
        escaped = await c.get("/%2E%2E/secret.txt")
        assert "not for you" not in await escaped.text()
        api = await c.get("/api/v1/no-such-route")
        assert api.status == 404
        assert (await api.json())["error"] == "not_found"


async def test_the_web_ui_is_sent_gzipped_when_the_build_has_a_gz(
    bus: InProcessBus, tmp_path: Path
) -> None:
    dist = tmp_path / "dist"
    (dist / "assets").mkdir(parents=True)
    (dist / "index.html").write_text("<html>app</html>")
    script = b"console.log('app');" * 200
    (dist / "assets" / "app.js").write_bytes(script)
    (dist / "assets" / "app.js.gz").write_bytes(gzip.compress(script))
    async with TestClient(TestServer(create_app(settings(frontend_dir=str(dist)), bus))) as c:
        zipped = await c.get("/assets/app.js", headers={"Accept-Encoding": "gzip"})
        assert zipped.headers["Content-Encoding"] == "gzip"
        assert await zipped.read() == script  # the client inflates it
        plain = await c.get("/assets/app.js", headers={"Accept-Encoding": "identity"})
        assert "Content-Encoding" not in plain.headers
        assert await plain.read() == script


async def test_without_a_build_the_root_says_where_the_api_is(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(settings(frontend_dir="/nonexistent"), bus))) as c:
        root = await c.get("/")
        assert root.status == 200
        assert "/api/v1/docs" in await root.text()


async def test_cors_is_off_by_default(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(settings(), bus))) as c:
        answer = await c.get("/api/v1/openapi.json", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in answer.headers


async def test_cors_allows_the_configured_origins_only(bus: InProcessBus) -> None:
    app = create_app(settings(cors_origins=("https://ui.lab.example",)), bus)
    async with TestClient(TestServer(app)) as c:
        allowed = await c.options(
            "/api/v1/reservations",
            headers={
                "Origin": "https://ui.lab.example",
                "Access-Control-Request-Method": "POST",
                "Access-Control-Request-Headers": "authorization, content-type",
            },
        )
        assert allowed.status == 204
        assert allowed.headers["Access-Control-Allow-Origin"] == "https://ui.lab.example"
        assert "Authorization" in allowed.headers["Access-Control-Allow-Headers"]
        # Error answers carry it too, so the browser shows the JSON error, not a CORS failure.
        refused = await c.get("/api/v1/me", headers={"Origin": "https://ui.lab.example"})
        assert refused.status == 401
        assert refused.headers["Access-Control-Allow-Origin"] == "https://ui.lab.example"
        other = await c.get("/api/v1/me", headers={"Origin": "https://evil.example"})
        assert "Access-Control-Allow-Origin" not in other.headers


async def test_anyone_may_read_wardens_ssh_public_key(bus: InProcessBus, tmp_path: Path) -> None:
    key = asyncssh.generate_private_key("ssh-ed25519", comment="warden@head")
    key.write_private_key(str(tmp_path / "warden_key"))
    with_key = Settings(ssh=SshSettings(key_file=str(tmp_path / "warden_key")), dev=True)
    async with TestClient(TestServer(create_app(with_key, bus))) as c:
        answer = await c.get("/api/v1/ssh-key")  # no token: the sign-in page shows it
        assert answer.status == 200
        body = await answer.json()
        assert body["public_key"] == key.export_public_key("openssh").decode().strip()
        assert "authorized_keys" in body["instructions"]


async def test_without_a_key_the_ssh_key_is_a_404_naming_no_file(bus: InProcessBus) -> None:
    async with TestClient(TestServer(create_app(settings(), bus))) as c:
        answer = await c.get("/api/v1/ssh-key")
        assert answer.status == 404
        body = await answer.json()
        assert body["error"] == "not_found"
        assert "ssh.key_file" not in json.dumps(body["details"])


async def test_the_built_documentation_is_served_at_docs(tmp_path: Path) -> None:
    from services.gateway import frontend

    site = tmp_path / "site"
    (site / "users" / "jobs").mkdir(parents=True)
    (site / "index.html").write_text("<h1>Warden docs</h1>")
    (site / "users" / "jobs" / "index.html").write_text("<h1>Jobs</h1>")
    (tmp_path / "secret.txt").write_text("not for the web")
    app = web.Application()
    frontend.add_docs_routes(app, site)
    async with TestClient(TestServer(app)) as c:
        folder = await c.get("/docs", allow_redirects=False)
        assert folder.status == 302 and folder.headers["Location"] == "/docs/"
        assert "Warden docs" in await (await c.get("/docs/")).text()
        assert "Jobs" in await (await c.get("/docs/users/jobs/")).text()
        assert (await c.get("/docs/nothing/")).status == 404
        assert (await c.get("/docs/%2e%2e/secret.txt")).status == 404


async def test_without_a_built_site_docs_says_where_the_documentation_is(
    tmp_path: Path,
) -> None:
    from services.gateway import frontend

    app = web.Application()
    frontend.add_docs_routes(app, tmp_path / "absent")
    async with TestClient(TestServer(app)) as c:
        answer = await c.get("/docs/")
        assert answer.status == 200
        assert "make docs" in await answer.text()
