"""The `warden` commands for researchers, over the REST API: login, logout, status, reserve,
reservations, cancel, calendar-feed, idle, jobs, submit, stop, logs, queue, violations,
maintenance, report.

Tables for people (rich), `--json` for scripts (the API's JSON as it came). Exit status: 0 done,
1 refused or failed (why on stderr), 2 usage. This module assembles the commands of each
resource (`session`, `status`, `reservations`, `jobs`, `violations`, `reports`) and turns their
errors into those exit statuses; the tables are in `render`, the command line's readers in `args`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from services.client import (
    account,
    calendar_feed,
    idle,
    jobs,
    maintenance,
    notifications,
    queue,
    reports,
    reservations,
    session,
    settings,
    status,
    violations,
)
from services.client.api import ClientError
from services.client.args import Subcommands, UsageError
from services.client.store import CredentialsError

# In the order `warden --help` lists their commands.
_RESOURCES = (
    session,
    account,
    status,
    reservations,
    calendar_feed,
    idle,
    notifications,
    jobs,
    queue,
    violations,
    maintenance,
    reports,
    settings,
)


def guarded(command: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Errors as one message (and reasons) on stderr: 1 refused or failed, 2 usage."""

    def run(args: argparse.Namespace) -> int:
        try:
            return command(args)
        except UsageError as err:
            print(f"warden {args.command}: {err}", file=sys.stderr)
            return 2
        except ClientError as err:
            lines = err.lines()
            print(f"warden: {lines[0]}", *lines[1:], sep="\n", file=sys.stderr)
            return 1
        except CredentialsError as err:
            print(f"warden: {err} (`warden login` writes it again)", file=sys.stderr)
            return 1

    run.__name__ = command.__name__
    return run


CLIENT_COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    name: guarded(function)
    for resource in _RESOURCES
    for name, function in resource.COMMANDS.items()
}
"""What `services.cli.main` runs for each client command."""


def add_client_commands(
    commands: Subcommands, parents: Sequence[argparse.ArgumentParser] = ()
) -> None:
    """The client commands, on `warden`'s subcommands."""
    for resource in _RESOURCES:
        resource.add_parsers(commands, parents)
