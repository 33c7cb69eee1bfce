"""`warden` starts without the server's libraries unless the command needs them: a client
command or `--help` imports no database, broker, SSH or web framework (bench/cli_start.py
measures the time this saves). Each check runs in a fresh interpreter, as `warden` does."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

SERVER_LIBRARIES = {"sqlalchemy", "alembic", "aiohttp", "asyncssh", "aio_pika", "aiormq"}

# Python that runs a `warden` entry point as the command line would, then prints which of the
# server's libraries it imported.
PROBE = """
import json, sys
from {module} import main
try:
    main({argv!r})
except SystemExit:
    pass
print(json.dumps(sorted({{name.split(".")[0] for name in sys.modules}} & {libraries!r})))
"""


def imported(module: str, argv: list[str]) -> list[str]:
    code = PROBE.format(module=module, argv=argv, libraries=SERVER_LIBRARIES)
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    return list(json.loads(done.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "argv", [["--help"], ["--version"], ["version"], ["status", "--help"], ["login", "--help"]]
)
def test_the_servers_warden_runs_a_client_command_without_the_servers_libraries(
    argv: list[str],
) -> None:
    assert imported("services.cli", argv) == []


@pytest.mark.parametrize("argv", [["--help"], ["hosts", "list", "--help"], ["version"]])
def test_the_client_alone_imports_none_of_them(argv: list[str]) -> None:
    assert imported("services.client.main", argv) == []


def test_a_server_command_still_finds_them() -> None:
    assert "sqlalchemy" in imported("services.cli", ["db", "current", "--config", "/nonexistent"])
