"""`warden settings`: how Warden's e-mail and chat messages go out, for admins
(`/api/v1/settings/delivery`): show what is in force, set the SMTP server, add or remove chat
webhooks, forget what was saved (the configuration file holds again), send a test.

Secrets never go on the command line: the SMTP password is read from stdin
(`--password-stdin`), and answers never hold a password, a webhook URL or a signing key.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from typing import Any

from services.client.args import Subcommands, UsageError, json_flag
from services.client.columns import Column
from services.client.output import console, print_json
from services.client.render import make_table, printable
from services.client.session import stored_api

WEBHOOK_COLUMNS = (Column("WEBHOOK", 10), Column("FORMAT"), Column("URL", 12), Column("KEY"))

PATH = "/settings/delivery"
FORMATS = ("slack", "mattermost", "discord", "teams", "json")
SOURCES = {"settings": "saved in Warden", "file": "the configuration file", "none": "not set up"}


def _show(delivery: dict[str, Any]) -> None:
    smtp, hooks = delivery["smtp"], delivery["webhooks"]
    if smtp["host"]:
        login = f", login {printable(smtp['username'])}" if smtp["username"] else ""
        password = " (password set)" if smtp["password_set"] else ""
        where = f"{printable(smtp['host'])}:{smtp['port']} {smtp['security']}{login}{password}"
        print(f"e-mail: {where}, from {printable(smtp['mail_from'])}")
    else:
        print("e-mail: not set up")
    print(f"  from: {SOURCES.get(smtp['source'], smtp['source'])}")
    rows = [
        [
            printable(t["name"]),
            t["format"],
            printable(t["url_hint"]),
            "yes" if t["secret_set"] else "-",
        ]
        for t in hooks["targets"]
    ]
    if rows:
        out = console()
        out.print(make_table(WEBHOOK_COLUMNS, rows, "chat webhooks", out.width))
    else:
        print("chat: no webhook")
    print(f"  from: {SOURCES.get(hooks['source'], hooks['source'])}")
    if delivery["reaches_nobody"]:
        print("violations reach nobody by e-mail or chat: set up one of the two")


def _smtp(args: argparse.Namespace) -> dict[str, Any]:
    if args.forget:
        return {"smtp": None}
    if not args.host or not args.mail_from:
        raise UsageError("give --host and --mail-from (or --forget)")
    body = {
        "host": args.host,
        "port": args.port,
        "security": args.security,
        "username": args.username,
        "mail_from": args.mail_from,
    }
    if args.password_stdin:
        body["password"] = sys.stdin.readline().rstrip("\n")
    return {"smtp": body}


def _kept(delivery: dict[str, Any]) -> list[dict[str, Any]]:
    """The saved webhooks as a PUT body keeps them (their URLs and keys stay on the server)."""
    return [{"name": t["name"], "format": t["format"]} for t in delivery["webhooks"]["targets"]]


def cmd_settings(args: argparse.Namespace) -> int:  # noqa: C901 - one branch per action
    api = stored_api()
    action = args.settings_action
    if action == "test":
        body = {"channel": args.channel, "to": args.to}
        answer = api.post(f"{PATH}/test", body)
        if args.json:
            print_json(answer)
            return 0
        for outcome in answer["outcomes"]:
            word = "sent" if outcome["ok"] else "not sent"
            print(f"{printable(outcome['target'])}: {word}: {printable(outcome['detail'])}")
        return 0 if all(o["ok"] for o in answer["outcomes"]) else 1
    if action == "smtp":
        change = _smtp(args)
    elif action == "webhook-add":
        if not args.url.startswith(("http://", "https://")):
            raise UsageError("the URL starts with http:// or https://")
        current = api.get(PATH)
        if current["webhooks"]["source"] != "settings":
            current["webhooks"]["targets"] = []  # the file's are not copied in
        hooks = [h for h in _kept(current) if h["name"] != args.name]
        change = {"webhooks": [*hooks, {"name": args.name, "format": args.format, "url": args.url}]}
    elif action == "webhook-remove":
        hooks = _kept(api.get(PATH))
        if args.name not in {h["name"] for h in hooks}:
            raise UsageError(f"no saved webhook is named {args.name!r}")
        change = {"webhooks": [h for h in hooks if h["name"] != args.name]}
    elif action == "webhooks":
        change = {"webhooks": None}
    else:
        change = {}
    delivery = api.request("PUT", PATH, body=change) if change else api.get(PATH)
    if args.json:
        print_json(delivery)
    else:
        _show(delivery)
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {"settings": cmd_settings}


def add_parsers(commands: Subcommands, common: Sequence[argparse.ArgumentParser]) -> None:
    parser = commands.add_parser(
        "settings",
        parents=common,
        help="admins: how e-mail and chat messages go out (SMTP, chat webhooks), and a test",
    )
    json_flag(parser)
    actions = parser.add_subparsers(dest="settings_action", metavar="ACTION")
    actions.add_parser("delivery", parents=common, help="what is in force, and from where")
    smtp = actions.add_parser(
        "smtp", parents=common, help="save the SMTP server (wins over the file)"
    )
    smtp.add_argument("--host")
    smtp.add_argument("--port", type=int, default=587)
    smtp.add_argument("--security", choices=("starttls", "tls", "none"), default="starttls")
    smtp.add_argument("--username", default="", help="the login; empty: none")
    smtp.add_argument(
        "--password-stdin", action="store_true", help="read the password from stdin (else kept)"
    )
    smtp.add_argument("--mail-from", metavar="ADDRESS", help="the sender's address")
    smtp.add_argument(
        "--forget", action="store_true", help="forget the saved server: the file's holds again"
    )
    add = actions.add_parser("webhook-add", parents=common, help="add (or replace) a chat webhook")
    add.add_argument("name", help="how timelines name it")
    add.add_argument("url", help="the webhook's URL (a secret: never shown again)")
    add.add_argument("--format", choices=FORMATS, default="slack")
    remove = actions.add_parser("webhook-remove", parents=common, help="remove a saved webhook")
    remove.add_argument("name")
    hooks = actions.add_parser(
        "webhooks", parents=common, help="--forget: the file's webhooks hold again"
    )
    hooks.add_argument("--forget", action="store_true", required=True)
    test = actions.add_parser("test", parents=common, help="send a test e-mail or chat message")
    test.add_argument("channel", choices=("email", "webhook"))
    test.add_argument("--to", metavar="ADDRESS", help="email: the address (default: yours)")
    for action in actions.choices.values():  # `--json` after the action too (not reset there)
        action.add_argument(
            "--json", action="store_true", default=argparse.SUPPRESS, help="print the API's JSON"
        )
