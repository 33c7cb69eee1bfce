"""`warden passwd`: choose a new password for the signed-in account, asked twice without echo
(or $WARDEN_NEW_PASSWORD for scripts). The server signs the account out everywhere, so the
command signs in again with the new password and keeps that session."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Sequence

from services.client.api import ClientError
from services.client.args import Subcommands
from services.client.session import my_username, stored_api


def _new_password() -> str:
    given = os.environ.get("WARDEN_NEW_PASSWORD")
    if given is not None:
        return given
    if not sys.stdin.isatty():
        raise ClientError("set WARDEN_NEW_PASSWORD or run on a terminal (to be asked it)")
    first = getpass.getpass("new password: ")
    if first != getpass.getpass("the same again: "):
        raise ClientError("the two passwords differ: nothing changed")
    return first


def cmd_passwd(_args: argparse.Namespace) -> int:
    api = stored_api()
    username = my_username(api)
    password = _new_password()
    api.request("PATCH", f"/users/{username}", body={"password": password})
    api.login(username, password)  # the change ended every session, this one too
    print(f"password of {username} changed; every other session of yours is signed out")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"passwd": cmd_passwd}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    commands.add_parser(
        "passwd",
        parents=common,
        help="choose a new password (asked twice; $WARDEN_NEW_PASSWORD for scripts)",
    )
