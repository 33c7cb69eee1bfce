"""The `warden` of the client alone (`services/client/main.py`) has every command of the
server's `warden` but the server's own, and says where those are."""

from __future__ import annotations

import argparse

import pytest

from services import cli
from services.client import main as client


def command_names(parser: argparse.ArgumentParser) -> set[str]:
    (commands,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return set(commands.choices)


def test_the_client_has_every_command_but_the_servers() -> None:
    server = command_names(cli.build_parser())
    assert set(client.SERVER_COMMANDS) <= server
    assert command_names(client.build_parser()) == server - set(client.SERVER_COMMANDS)


@pytest.mark.parametrize("command", client.SERVER_COMMANDS)
def test_a_server_command_says_which_package_has_it(
    command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert client.main([command, "--help"]) == 2
    said = capsys.readouterr().err
    assert f"warden {command}: a command of the server" in said
    assert "gpu-warden" in said


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert client.main(["version"]) == 0
    assert capsys.readouterr().out.endswith("(client)\n")
