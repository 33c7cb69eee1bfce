"""The signed-in session: `warden login` and `warden logout`, and the API client (for the
stored login) that every other client command uses."""

from __future__ import annotations

import argparse
import getpass
import os
import sys
from collections.abc import Callable, Sequence

from services.client.api import Api, ClientError
from services.client.args import Subcommands, UsageError
from services.client.store import Credentials, CredentialsError, CredentialStore, server_url


def _store() -> CredentialStore:
    return CredentialStore()


def _server(stored: Credentials | None) -> str:
    try:
        return server_url(stored)
    except ValueError as err:  # a bad $WARDEN_SERVER (what login stores is checked)
        raise ClientError(f"WARDEN_SERVER: {err}") from None


def stored_api() -> Api:
    """A client for the stored login (and $WARDEN_SERVER, when set)."""
    store = _store()
    stored = store.load()
    return Api(_server(stored), credentials=stored, store=store)


def my_username(api: Api) -> str:
    if api.credentials is not None and api.credentials.username:
        return api.credentials.username
    answer = api.get("/me")
    return str(answer["user"]["username"])


def cmd_login(args: argparse.Namespace) -> int:
    store = _store()
    try:
        stored = store.load()
    except CredentialsError:
        stored = None  # replaced by this login
    try:
        server = server_url(stored, args.server)
    except ValueError as err:
        raise UsageError(str(err)) from None
    username = args.user or os.environ.get("USER") or _local_username()
    if not username:
        raise UsageError("cannot tell your username: give --user NAME")
    password = os.environ.get("WARDEN_PASSWORD")
    if password is None:
        if not sys.stdin.isatty():
            raise ClientError("set WARDEN_PASSWORD or run on a terminal (to be asked the password)")
        password = getpass.getpass(f"password of {username} at {server}: ")
    api = Api(server, store=store)
    user = api.login(username, password)
    roles = ", ".join(user.get("roles") or ())
    name = user.get("username", username)
    print(f"signed in to {server} as {name}" + (f" ({roles})" if roles else ""))
    print(f"credentials stored in {store.path}")
    if user.get("change_at_sign_in"):
        print("an admin chose this password: choose your own with `warden passwd`")
    return 0


def _local_username() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):
        return None


def cmd_logout(_args: argparse.Namespace) -> int:
    store = _store()
    try:
        stored = store.load()
    except CredentialsError:
        stored = None
    if stored is None or not stored.signed_in:
        store.delete()
        print("not signed in")
        return 0
    api = Api(_server(stored), credentials=stored, store=store)
    problem: ClientError | None = None
    try:
        api.logout()
    except ClientError as err:
        problem = err
    store.delete()
    if problem is not None:
        print(
            f"warden: could not revoke the session on the server: {problem.message}\n"
            f"(the local credentials are deleted; the session ends when it expires)",
            file=sys.stderr,
        )
        return 1
    print(f"signed out of {api.server}")
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "login": cmd_login,
    "logout": cmd_logout,
}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    login = commands.add_parser(
        "login",
        parents=common,
        help="sign in to a Warden server and keep the session "
        "(password: $WARDEN_PASSWORD, else asked)",
    )
    login.add_argument(
        "--server",
        metavar="URL",
        help="e.g. http://warden.lab:8080 (default: $WARDEN_SERVER, "
        "else the last one, else the local config's [gateway], else http://127.0.0.1:8080)",
    )
    login.add_argument("--user", metavar="NAME", help="your username (default: $USER)")

    commands.add_parser("logout", parents=common, help="sign out and delete the stored session")
