"""Warden's SSH key from the first run: `warden init` makes it in the data directory when none
is configured, every service then uses it, `warden key` and GET /api/v1/ssh-key show its line
and a command that installs it (run here through a real shell)."""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
from pathlib import Path

import asyncssh
import pytest
from aiohttp.test_utils import TestClient, TestServer

from services.cli import main
from services.gateway.app import create_app
from services.shared.bus.inproc import InProcessBus
from services.shared.config import load_settings
from services.shared.remote.ssh import authorize_command


@pytest.fixture(autouse=True)
def clean_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    return home


def test_init_on_a_clean_home_makes_wardens_key_and_every_service_uses_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["init"]) == 0
    key_file = tmp_path / "xdg-data" / "warden" / "ssh" / "warden_ed25519"
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert "made Warden's SSH key" in capsys.readouterr().out
    assert load_settings().ssh.key_file == str(key_file)

    assert main(["key"]) == 0
    shown = capsys.readouterr()
    line = asyncssh.read_private_key(str(key_file)).export_public_key().decode().strip()
    assert shown.out.split()[:2] == line.split()[:2]
    assert "~/.ssh/authorized_keys" in shown.err.splitlines()[-1]

    assert main(["init"]) == 0  # again (`make run` does): the same key is kept
    assert "made" not in capsys.readouterr().out
    assert asyncssh.read_private_key(str(key_file)).export_public_key().decode().strip() == line


def test_init_makes_no_key_when_one_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARDEN_SSH_KEY_FILE", str(tmp_path / "mine"))
    assert main(["init"]) == 0
    assert not (tmp_path / "xdg-data" / "warden" / "ssh").exists()


def test_the_install_command_adds_exactly_the_line_through_a_real_shell(tmp_path: Path) -> None:
    home = tmp_path / "someone"
    home.mkdir()
    # A comment with quotes and a command substitution: it must land verbatim, run nothing.
    line = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB warden's key $(touch pwned) `id`"
    for _ in range(2):
        subprocess.run(["sh", "-c", authorize_command(line)], env={"HOME": str(home)}, check=True)
    authorized = home / ".ssh" / "authorized_keys"
    assert authorized.read_text() == f"{line}\n{line}\n"
    assert stat.S_IMODE(authorized.stat().st_mode) == 0o600
    assert not (home / "pwned").exists() and not Path("pwned").exists()


async def test_after_init_the_api_answers_the_key_and_its_install_command(
    bus: InProcessBus, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await asyncio.to_thread(main, ["init"]) == 0  # it runs its own event loop
    settings = load_settings()
    line = asyncssh.read_private_key(settings.ssh.key_file).export_public_key().decode().strip()
    async with TestClient(TestServer(create_app(settings, bus))) as client:
        answer = await client.get("/api/v1/ssh-key")  # public: the sign-in page shows it
        assert answer.status == 200
        body = await answer.json()
    assert body["public_key"] == line
    assert body["install_command"] == authorize_command(line)
