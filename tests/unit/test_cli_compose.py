"""`warden init --compose` (the compose .env) and `warden key --generate` (Warden's SSH key in
the containers' data volume), called in-process through `services.cli.main([...])`."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import asyncssh
import pytest

from services.cli import main
from services.shared.deploy import COMPOSE_SECRETS, read_env_file

COMPOSE_FILE = Path(__file__).resolve().parents[2] / "docker-compose.yml"


@pytest.fixture(autouse=True)
def no_warden_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)


def test_init_compose_writes_a_private_env_with_every_secret_the_compose_file_needs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    assert main(["init", "--compose", "--env-file", str(env)]) == 0
    assert stat.S_IMODE(env.stat().st_mode) == 0o600
    values = read_env_file(env)
    for name in COMPOSE_SECRETS:
        assert len(values[name]) >= 32, name
        # Each is required by the compose file (`${NAME:?...}`), so compose starts with it.
        assert "${" + name + ":?" in COMPOSE_FILE.read_text(), name
    assert len({values[name] for name in COMPOSE_SECRETS}) == len(COMPOSE_SECRETS)
    out = capsys.readouterr().out
    assert "wrote" in out and values["WARDEN_JWT_SECRET"] not in out  # names only, no values


def test_init_compose_keeps_the_values_of_an_existing_env_and_adds_missing_ones(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    env = tmp_path / ".env"
    env.write_text("# mine\nPOSTGRES_PASSWORD=kept-as-it-is\nGATEWAY_HOST_PORT=9000")
    assert main(["init", "--compose", "--env-file", str(env)]) == 0
    values = read_env_file(env)
    assert values["POSTGRES_PASSWORD"] == "kept-as-it-is"
    assert values["GATEWAY_HOST_PORT"] == "9000"
    assert env.read_text().startswith("# mine\nPOSTGRES_PASSWORD=kept-as-it-is\n")
    assert len(values["RABBITMQ_PASSWORD"]) >= 32
    assert "kept its values and added" in capsys.readouterr().out

    before = env.read_text()
    assert main(["init", "--compose", "--env-file", str(env)]) == 0
    assert env.read_text() == before
    assert "keeping it" in capsys.readouterr().out


def test_key_generate_makes_a_private_key_once_and_prints_its_public_half(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    key_file = tmp_path / "data" / "ssh" / "id_ed25519"
    monkeypatch.setenv("WARDEN_SSH_KEY_FILE", str(key_file))
    monkeypatch.setenv("WARDEN_AUTH_JWT_SECRET", "x" * 48)
    monkeypatch.setenv("WARDEN_STORAGE_DATA_DIR", str(tmp_path / "data"))
    assert main(["key", "--generate"]) == 0
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    key = asyncssh.read_private_key(str(key_file))
    public = key.export_public_key("openssh").decode().split()[:2]
    first = capsys.readouterr()
    assert first.out.split()[:2] == public
    assert "made the SSH key" in first.err

    assert main(["key", "--generate"]) == 0  # there already: kept
    second = capsys.readouterr()
    assert second.out.split()[:2] == public and "made" not in second.err


def test_key_generate_without_a_key_file_setting_makes_the_data_dirs_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WARDEN_AUTH_JWT_SECRET", "x" * 48)
    monkeypatch.setenv("WARDEN_STORAGE_DATA_DIR", str(tmp_path / "data"))
    assert main(["key", "--generate"]) == 0
    key = asyncssh.read_private_key(str(tmp_path / "data" / "ssh" / "warden_ed25519"))
    assert capsys.readouterr().out.split()[:2] == key.export_public_key().decode().split()[:2]
