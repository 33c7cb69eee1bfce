"""Warden as a lab installs it: the wheels built from this checkout (`make wheels`), each put into
a clean virtual environment of its own, as processes.

The server's wheel (gpu-warden): `warden init`, `warden db upgrade` and `warden run all` answer
/api/v1/health, serve the web UI built into the wheel and the API docs page, and its `warden`
signs in and reads the GPUs. The client's wheel (gpu-warden-client) holds none of the server's
libraries, and its `warden login` finds the server from --server, $WARDEN_SERVER and the local
config in turn. pip installs the dependencies from the index the machine is set up with.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.polling import until_sync
from tests.support.ports import free_port

pytestmark = [pytest.mark.deploy, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[2]
UI_INDEX = ROOT / "frontend" / "dist" / "index.html"
PASSWORD = "wheel test pw"
START_DEADLINE_S = 90


def run(*argv: str | Path, env: dict[str, str] | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [str(part) for part in argv],
        capture_output=True,
        text=True,
        env=env,
        stdin=subprocess.DEVNULL,
        timeout=600,
        check=False,
    )
    if check and done.returncode != 0:
        pytest.fail(
            f"{' '.join(map(str, argv))} exited {done.returncode}:\n{done.stdout}{done.stderr}"
        )
    return done.stdout


def venv_with(directory: Path, wheel: Path) -> Path:
    """A fresh virtual environment with `wheel` installed; its bin folder."""
    run(sys.executable, "-m", "venv", directory)
    run(directory / "bin/python", "-m", "pip", "install", "--quiet", wheel)
    return directory / "bin"


@dataclass
class Wheels:
    server: Path
    client: Path


# What a build of the checkout leaves out: environments, caches, earlier builds.
_NOT_SOURCE = {".venv", "build", "dist", "site", ".data", ".mypy_cache", ".pytest_cache"}


def _source_copy(dest: Path) -> Path:
    """The checkout (its .git too, for the version) without what a build leaves out: a build
    in the checkout itself would write gpu_warden.egg-info there, whose version every later
    `import services` in the checkout reads instead of the installed one."""

    def ignore(directory: str, names: list[str]) -> set[str]:
        top = Path(directory) == ROOT
        return {
            n
            for n in names
            if n == "node_modules" or n.endswith(".egg-info") or (top and n in _NOT_SOURCE)
        }

    shutil.copytree(ROOT, dest, ignore=ignore, symlinks=True)
    return dest


@pytest.fixture(scope="module")
def wheels(tmp_path_factory: pytest.TempPathFactory) -> Wheels:
    out = tmp_path_factory.mktemp("dist")
    source = _source_copy(tmp_path_factory.mktemp("source") / "warden")
    # The sdist, then the wheel from it (unpacked elsewhere): what the sdist lacks, the wheel
    # lacks too, and no leftover of an earlier in-tree build (build/) gets in.
    run(sys.executable, "-m", "build", "--outdir", out, source)
    run(sys.executable, source / "bin/build-client", "--outdir", out)
    (server,) = out.glob("gpu_warden-*.whl")
    (client,) = out.glob("gpu_warden_client-*.whl")
    return Wheels(server, client)


@dataclass
class Server:
    bin: Path
    config: Path
    url: str
    env: dict[str, str]
    log: Path


def get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except OSError:
        return 0, ""


@pytest.fixture(scope="module")
def server(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    here = tmp_path_factory.mktemp("server")
    bin_dir = venv_with(here / "venv", wheels.server)
    port = free_port()
    env = {
        **os.environ,
        "HOME": str(here / "home"),  # the CLI's credentials: not the developer's
        "WARDEN_GATEWAY_PORT": str(port),
        "WARDEN_MONITOR_LOCAL_NVML": "off",
        "WARDEN_ADMIN_PASSWORD": PASSWORD,
    }
    env.pop("WARDEN_SERVER", None)
    config = here / "warden.toml"
    init = ("init", "--config", config, "--data-dir", here / "data")
    run(
        bin_dir / "warden",
        *init,
        "--admin-user",
        "boss",
        "--admin-email",
        "boss@lab.example",
        env=env,
    )
    run(bin_dir / "warden", "db", "upgrade", "--config", config, env=env)
    log = here / "run.log"
    with log.open("w") as output:
        process = subprocess.Popen(
            [bin_dir / "warden", "run", "all", "--config", config],
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:

        def healthy() -> bool:
            assert process.poll() is None, log.read_text()
            return get(f"{url}/api/v1/health")[0] == 200

        until_sync(
            healthy,
            "warden run all from the wheel answering /api/v1/health",
            START_DEADLINE_S,
            report=log.read_text,
        )
        yield Server(bin_dir, config, url, env, log)
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_the_servers_wheel_runs_every_service(server: Server) -> None:
    status, body = get(f"{server.url}/api/v1/health")
    assert status == 200, body
    assert json.loads(body)["status"] == "ok"
    assert run(server.bin / "warden", "version").startswith("warden 0")


def test_it_serves_the_web_ui_built_into_it_and_the_api_docs(server: Server) -> None:
    status, page = get(f"{server.url}/reservations")
    if UI_INDEX.is_file():  # `make frontend` ran before the wheel was built (make test does)
        assert (status, page) == (200, UI_INDEX.read_text())
    else:
        assert status == 200
        assert "web UI is not built here" in page
    status, docs = get(f"{server.url}/api/v1/docs")
    assert status == 200
    assert "swagger-ui-bundle.js" in docs


def test_its_warden_signs_in_and_reads_the_gpus(server: Server) -> None:
    env = {**server.env, "WARDEN_PASSWORD": PASSWORD}
    run(server.bin / "warden", "login", "--server", server.url, "--user", "boss", env=env)
    assert json.loads(run(server.bin / "warden", "status", "--json", env=env))["gpus"] == []
    users = run(server.bin / "warden", "user", "list", "--config", server.config, env=env)
    assert "boss" in users


@pytest.fixture(scope="module")
def client(wheels: Wheels, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin folder of a clean virtual environment with the client's wheel alone."""
    return venv_with(tmp_path_factory.mktemp("client") / "venv", wheels.client)


def test_the_client_alone_installs_none_of_the_servers_libraries(
    client: Path, tmp_path: Path
) -> None:
    for library in ("aiohttp", "sqlalchemy", "asyncssh", "services.shared", "services.cli"):
        probe = subprocess.run(  # not in the checkout, whose services/ `-c` would find
            [client / "python", "-c", f"import {library}"], cwd=tmp_path, check=False
        )
        assert probe.returncode == 1, f"{library} is installed"
    assert run(client / "warden", "--version").endswith("(client)\n")


def test_the_clients_login_takes_the_server_from_flag_environment_and_local_config(
    client: Path, server: Server, tmp_path: Path
) -> None:
    warden = client / "warden"
    env = {
        **{k: v for k, v in server.env.items() if not k.startswith("WARDEN_")},
        "HOME": str(tmp_path / "home"),
        "WARDEN_PASSWORD": PASSWORD,
    }
    said = run(warden, "login", "--server", server.url, "--user", "boss", env=env)
    assert said.startswith(f"signed in to {server.url} as boss")
    run(warden, "logout", env=env)

    said = run(warden, "login", "--user", "boss", env={**env, "WARDEN_SERVER": server.url})
    assert said.startswith(f"signed in to {server.url} as boss")
    run(warden, "logout", env=env)

    # On the head node: the config `warden run` reads names the gateway (its port from the
    # environment, as the server took it).
    local = {
        **env,
        "WARDEN_CONFIG": str(server.config),
        "WARDEN_GATEWAY_PORT": server.env["WARDEN_GATEWAY_PORT"],
    }
    said = run(warden, "login", "--user", "boss", env=local)
    assert said.startswith(f"signed in to {server.url} as boss")
    assert json.loads(run(warden, "status", "--json", env=env))["gpus"] == []
    refused = subprocess.run(
        [warden, "run", "all"], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 2
    assert "gpu-warden" in refused.stderr
