"""`warden user ...`, `warden setup-link` and the first admin of `warden init`: accounts
written to the reservations database directly (no service needs to run)."""

from __future__ import annotations

import argparse
import asyncio
import getpass
import os
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any

from services.shared.config import Settings, load_settings
from services.shared.errors import InvalidRequest, WardenError

if TYPE_CHECKING:
    from services.shared.storage.store import Store

# Who account changes made here are attributed to (in the reservations service's log).
CLI_ACTOR = "cli"


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "config", None), dev=getattr(args, "dev", False))


def _local_username() -> str | None:
    try:
        return getpass.getuser()
    except (OSError, KeyError, ImportError):  # no login name in the environment nor passwd
        return None


async def first_admin(settings: Settings, args: argparse.Namespace) -> None:
    """Create the first admin unless there is one; without a password say how to do it later."""
    from services.accounts import provisioning
    from services.accounts import users as accounts
    from services.accounts.provisioning import NewAccount

    hint = (
        "no admin yet: `warden run all` prints a one-time set-up link that creates one in "
        "the browser (or: `warden user add NAME --email E --admin`)"
    )
    async with _reservations_store(settings) as store:
        async with store.read() as conn:
            if await accounts.count_admins(conn):
                print("an admin exists already (`warden user list` shows the accounts)")
                return
        username = args.admin_user or _local_username()
        if not username:
            print(f"{hint} (cannot tell your UNIX username; or use `warden init --admin-user`)")
            return
        email = args.admin_email or f"{username}@localhost"
        try:
            accounts.check_user_fields(username=username, email=email)
        except InvalidRequest as err:
            raise InvalidRequest(
                f"{err.message} (choose the first admin with --admin-user / --admin-email)",
                err.details,
            ) from err
        # Asked only on a terminal, where an empty answer leaves it to the set-up link.
        password = _new_password(
            "WARDEN_ADMIN_PASSWORD",
            f"the admin {username} (empty: create the admin later in the browser)",
            allow_empty=True,
        )
        if not password:
            print(hint)
            return
        admin = NewAccount(username, email, password, is_admin=True)
        async with store.write() as conn:
            [user] = await provisioning.create_accounts(conn, [admin], actor=CLI_ACTOR)
    print(f"created the first admin {_describe(user)}")


# --- warden user ------------------------------------------------------------------------------


@asynccontextmanager
async def _reservations_store(settings: Settings) -> AsyncIterator[Store]:
    """The accounts' (reservations) database, refused unless migrated (it says to run `warden
    db upgrade`)."""
    from services.accounts.provisioning import accounts_database

    async with accounts_database(settings) as store:
        yield store


def _new_password(variable: str, whose: str, *, allow_empty: bool = False) -> str | None:
    """A new password from $variable, else asked twice on a terminal; None when neither
    (and, with `allow_empty`, when the answer on the terminal is empty)."""
    from services.accounts.passwords import password_problem

    given = os.environ.get(variable)
    if given is not None:
        return given
    if not sys.stdin.isatty():
        return None
    first = getpass.getpass(f"new password for {whose}: ")
    if allow_empty and not first:
        return None
    problem = password_problem(first)
    if problem:
        raise InvalidRequest(f"the password {problem}; nothing changed", {"password": problem})
    if getpass.getpass("the same again: ") != first:
        raise InvalidRequest("the two passwords differ; nothing changed")
    return first


def _required_password(whose: str) -> str:
    password = _new_password("WARDEN_PASSWORD", whose)
    if password is None:
        raise WardenError("set WARDEN_PASSWORD or run on a terminal (to be asked the password)")
    return password


def _describe(user: dict[str, Any]) -> str:
    groups = ", ".join(user["groups"]) or "none"
    return f"{user['username']} ({', '.join(user['roles'])}; groups: {groups})"


def format_users(users: Sequence[dict[str, Any]]) -> str:
    rows = [("USERNAME", "EMAIL", "ROLES", "GROUPS")]
    rows += [
        (u["username"], u["email"], ",".join(u["roles"]), ",".join(u["groups"]) or "-")
        for u in users
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row[:3], widths, strict=True))
        + "  "
        + row[3]
        for row in rows
    )


async def _user_add(store: Store, args: argparse.Namespace) -> None:
    from services.accounts import provisioning
    from services.accounts import users as accounts
    from services.accounts.provisioning import NewAccount
    from services.shared.errors import AlreadyExists

    accounts.check_user_fields(username=args.username, email=args.email)
    async with store.read() as conn:
        if await accounts.is_admin(conn, args.username) is not None:
            raise AlreadyExists(f"user {args.username} exists already")
    password = _required_password(args.username)
    account = NewAccount(args.username, args.email, password, args.admin, args.groups)
    async with store.write() as conn:
        [user] = await provisioning.create_accounts(conn, [account], actor=CLI_ACTOR)
    print(f"created user {_describe(user)}")


async def _user_list(store: Store, _args: argparse.Namespace) -> None:
    from services.accounts import users as accounts

    async with store.read() as conn:
        users = await accounts.list_users(conn)
    if users:
        print(format_users(users))
    else:
        print("no users yet: `warden user add NAME --email E --admin` creates an admin")


async def _user_passwd(store: Store, args: argparse.Namespace) -> None:
    from services.accounts import users as accounts

    async with store.read() as conn:
        await accounts.get_user(conn, args.username)  # NotFound before asking anything
    password = _required_password(args.username)
    from services.accounts import sessions
    from services.reservations.store import now_ms

    async with store.write() as conn:
        await accounts.update_user(
            conn, args.username, password=password, actor=CLI_ACTOR, change_at_sign_in=True
        )
        await sessions.revoke_user(conn, args.username, now_ms())  # signed out everywhere
    print(f"changed the password of {args.username} (they choose their own at sign-in)")


async def _user_set_admin(store: Store, args: argparse.Namespace) -> None:
    from services.accounts import users as accounts

    admin = args.user_command == "promote"
    async with store.write() as conn:
        before = await accounts.get_user(conn, args.username)
        if ("admin" in before["roles"]) == admin:
            print(f"{args.username} is {'already' if admin else 'not'} an admin; nothing changed")
            return
        await accounts.update_user(conn, args.username, is_admin=admin, actor=CLI_ACTOR)
    print(f"{args.username} is {'now' if admin else 'no longer'} an admin")


def _link(settings: Settings, answer: dict[str, Any]) -> str:
    from urllib.parse import quote

    from services.gateway.setup_link import link_host

    gateway = settings.gateway
    base = gateway.public_url or f"http://{link_host(gateway.host)}:{gateway.port}"
    return f"{base.rstrip('/')}/password/{quote(answer['token'], safe='')}"


async def _user_invite(store: Store, args: argparse.Namespace) -> str:
    from services.accounts import password_links
    from services.accounts import users as accounts
    from services.reservations.store import now_ms

    ttl_ms = _settings(args).auth.password_link_ttl_s * 1000
    async with store.write() as conn:
        await accounts.create_user(
            conn,
            username=args.username,
            email=args.email,
            password=None,
            is_admin=args.admin,
            groups=args.groups,
            actor=CLI_ACTOR,
        )
        link = await password_links.issue(
            conn, args.username, "invite", actor=CLI_ACTOR, ttl_ms=ttl_ms, now=now_ms()
        )
    return (
        f"invited {args.username}: give them this link (it works once, until "
        f"{link['expires_at']}):\n{_link(_settings(args), link)}"
    )


async def _user_reset(store: Store, args: argparse.Namespace) -> str:
    from services.accounts import password_links
    from services.reservations.store import now_ms

    ttl_ms = _settings(args).auth.password_link_ttl_s * 1000
    async with store.write() as conn:
        link = await password_links.issue(
            conn, args.username, "reset", actor=CLI_ACTOR, ttl_ms=ttl_ms, now=now_ms()
        )
    return (
        f"a new password link for {args.username} (it works once, until {link['expires_at']}):"
        f"\n{_link(_settings(args), link)}"
    )


async def _user_end(store: Store, args: argparse.Namespace) -> str:
    from services.accounts import lifecycle
    from services.accounts.api import Actor
    from services.reservations.store import now_ms

    actor, action = Actor(CLI_ACTOR, True), args.user_command
    if action == "delete" and args.confirm != args.username:
        raise InvalidRequest(f"a delete is not undone: confirm with --confirm {args.username}")
    async with store.write() as conn:
        if action == "delete":
            await lifecycle.delete_user(conn, actor, args.username, now_ms())
        else:
            active = action == "activate"
            await lifecycle.set_active(conn, actor, args.username, active=active, now=now_ms())
    return f"{args.username} {action}d" + (
        " (signed out everywhere; free their bookings on the Users page)"
        if action == "deactivate"
        else ""
    )


async def _printed(
    action: Callable[[Store, argparse.Namespace], Awaitable[str]],
    store: Store,
    args: argparse.Namespace,
) -> None:
    print(await action(store, args))


def cmd_user(args: argparse.Namespace) -> int:
    settings = _settings(args)
    actions: dict[str, Callable[[Store, argparse.Namespace], Awaitable[None]]] = {
        "add": _user_add,
        "list": _user_list,
        "passwd": _user_passwd,
        "promote": _user_set_admin,
        "demote": _user_set_admin,
        "invite": partial(_printed, _user_invite),
        "reset": partial(_printed, _user_reset),
        "deactivate": partial(_printed, _user_end),
        "activate": partial(_printed, _user_end),
        "delete": partial(_printed, _user_end),
    }
    action = actions[args.user_command]

    async def act() -> None:
        async with _reservations_store(settings) as store:
            await action(store, args)

    asyncio.run(act())
    return 0


def cmd_setup_link(args: argparse.Namespace) -> int:
    """A fresh set-up token in a link, written to the reservations database directly: it works
    whichever process runs the gateway (the gateway's own banner has another, also valid)."""
    from services.accounts import setup_tokens as setup
    from services.gateway.setup_link import setup_url

    settings = _settings(args)

    async def issue() -> str | None:
        async with _reservations_store(settings) as store, store.write() as conn:
            return await setup.issue_token(conn)

    token = asyncio.run(issue())
    if token is None:
        raise WardenError("an admin exists already: sign in (`warden user list` shows accounts)")
    print(setup_url(settings.gateway.host, settings.gateway.port, token))
    print("# open it in a browser to create the first admin; it works once", file=sys.stderr)
    return 0
