"""Which server a client command talks to when given none: the local Warden config's gateway
(`services/client/local_config.py`), after --server, $WARDEN_SERVER and the stored login."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.client.local_config import config_path, configured_server
from services.client.store import DEFAULT_SERVER, Credentials, server_url


def config(tmp_path: Path, text: str) -> dict[str, str]:
    """An environment whose default config file (under HOME) holds `text`."""
    path = tmp_path / ".config" / "warden" / "warden.toml"
    path.parent.mkdir(parents=True)
    path.write_text(text)
    return {"HOME": str(tmp_path)}


def test_the_config_file_is_the_one_the_server_reads(tmp_path: Path) -> None:
    home = {"HOME": str(tmp_path)}
    assert config_path(home) == tmp_path / ".config/warden/warden.toml"
    assert config_path({**home, "XDG_CONFIG_HOME": "/x"}) == Path("/x/warden/warden.toml")
    assert config_path({**home, "WARDEN_CONFIG": "/etc/w.toml"}) == Path("/etc/w.toml")


@pytest.mark.parametrize(
    ("gateway", "server"),
    [
        ("", "http://127.0.0.1:8080"),
        ('host = "10.0.0.5"\nport = 9090', "http://10.0.0.5:9090"),
        ('host = "0.0.0.0"\nport = 8081', "http://127.0.0.1:8081"),
        ('host = "::1"', "http://[::1]:8080"),
        (
            'host = "0.0.0.0"\npublic_url = "https://warden.lab.example"',
            "https://warden.lab.example",
        ),
    ],
)
def test_the_gateway_of_the_local_config(tmp_path: Path, gateway: str, server: str) -> None:
    environ = config(tmp_path, f"[storage]\ndata_dir = '/d'\n\n[gateway]\n{gateway}\n")
    assert configured_server(environ) == server


def test_the_servers_environment_wins_over_the_file(tmp_path: Path) -> None:
    environ = config(tmp_path, '[gateway]\nhost = "10.0.0.5"\nport = 9090\n')
    environ |= {"WARDEN_GATEWAY_PORT": "7000"}
    assert configured_server(environ) == "http://10.0.0.5:7000"


@pytest.mark.parametrize("text", ["not = [toml", "gateway = 3\n", "\udcff"])
def test_no_usable_config_names_no_server(tmp_path: Path, text: str) -> None:
    path = tmp_path / "w.toml"
    path.write_bytes(text.encode("utf-8", "surrogateescape"))
    assert configured_server({"WARDEN_CONFIG": str(path)}) is None
    assert configured_server({"WARDEN_CONFIG": str(tmp_path / "absent.toml")}) is None


def test_login_takes_the_server_from_the_flag_the_environment_the_login_then_the_config(
    tmp_path: Path,
) -> None:
    environ = config(tmp_path, '[gateway]\nhost = "head"\nport = 8080\n')
    stored = Credentials("http://stored:8080")
    assert server_url(None, None, environ) == "http://head:8080"
    assert server_url(stored, None, environ) == "http://stored:8080"
    assert server_url(stored, None, {**environ, "WARDEN_SERVER": "env:1"}) == "http://env:1"
    assert server_url(stored, "given:2", {**environ, "WARDEN_SERVER": "env:1"}) == "http://given:2"
    assert server_url(None, None, {"HOME": str(tmp_path / "nobody")}) == DEFAULT_SERVER
