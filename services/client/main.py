"""`warden` of the client-only install (the gpu-warden-client package, `bin/build-client`): the
researchers' commands over the REST API and nothing of the server, so that it needs no more than
`rich` and starts at once. The server's `warden` (`services/cli.py`) has these commands too."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from services import __version__
from services.client import hosts
from services.client.commands import CLIENT_COMMANDS, add_client_commands, guarded

# What only the server's `warden` does; this one says where to get it instead of "invalid choice".
SERVER_COMMANDS = ("init", "run", "db", "key", "demo", "user", "sim", "setup-link")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="warden", description="The client of a Warden server (GPU cluster manager)."
    )
    parser.add_argument("--version", action="version", version=f"warden {__version__} (client)")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    host_parser = commands.add_parser(
        "hosts", help="the monitored hosts: list, add, edit, remove, check, drain, undrain"
    )
    actions = host_parser.add_subparsers(dest="hosts_command", required=True, metavar="ACTION")
    hosts.add_parsers(actions, [], lambda _check: None)  # no --local: that needs the server's
    add_client_commands(commands)
    commands.add_parser("version", help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv and argv[0] in SERVER_COMMANDS:
        print(
            f"warden {argv[0]}: a command of the server; this is the client alone "
            "(gpu-warden-client). Install the server's package, gpu-warden, where Warden runs.",
            file=sys.stderr,
        )
        return 2
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(f"warden {__version__} (client)")
        return 0
    command = guarded(hosts.run) if args.command == "hosts" else CLIENT_COMMANDS[args.command]
    try:
        return command(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
