"""The `warden` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

from services import SERVICE_NAMES, SERVICES_WITH_DATABASE, __version__
from services.shared.errors import WardenError

if TYPE_CHECKING:
    from services.shared.config import Settings

# The server's modules (configuration, databases, the services, the simulator) are imported by
# the commands that use them, never here: a client command (`warden status`) or `warden --help`
# starts without them (bench/cli_start.py measures it).

log = logging.getLogger("warden.cli")

SIM_HELP = "serve a simulated GPU fleet over SSH (demo, tests, benchmarks)"


def _seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"at least 0 seconds, not {text}")
    return value


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        help="config file (default: $WARDEN_CONFIG or ~/.config/warden/warden.toml)",
    )
    common.add_argument(
        "--dev",
        action="store_true",
        default=argparse.SUPPRESS,
        help="development mode: accept a missing or placeholder secret",
    )
    return common


# The subcommands of `warden` (or of one of its commands), which each `_add_..._parser` adds to.
Commands: TypeAlias = "argparse._SubParsersAction[argparse.ArgumentParser]"


def build_parser(sim: bool = True) -> argparse.ArgumentParser:
    """`warden`'s parser. `sim=False`: `sim` without its options, whose module takes long to
    import (`main` leaves them out of any command line without `sim`)."""
    common = _common()
    parser = argparse.ArgumentParser(
        prog="warden", description="GPU cluster manager for ML teams.", parents=[common]
    )
    parser.add_argument("--version", action="version", version=f"warden {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_init_parser(commands, common)
    _add_run_parser(commands, common)
    _add_db_parser(commands, common)
    _add_hosts_parser(commands, common)
    _add_key_parser(commands, common)
    _add_demo_parser(commands, common)
    _add_user_parser(commands, common)

    _add_sim_parser(commands, common, full=sim)

    from services.client.commands import add_client_commands

    add_client_commands(commands)  # no --config: they talk to a server, not its config

    commands.add_parser(
        "setup-link",
        parents=[common],
        help="print a new one-time link that creates the first admin in the browser "
        "(while there is none)",
    )
    commands.add_parser("version", parents=[common], help="print the version")
    return parser


def _add_sim_parser(commands: Commands, common: argparse.ArgumentParser, *, full: bool) -> None:
    if full:
        from services.sim.cli import add_parser

        add_parser(commands, [common])
    else:  # listed, with the same help, by `warden --help`
        commands.add_parser("sim", parents=[common], help=SIM_HELP, add_help=False)


def _add_init_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    init = commands.add_parser(
        "init",
        parents=[common],
        help="write a commented config file, migrate the databases, create the first admin",
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument(
        "--compose", action="store_true", help="instead: write docker-compose.yml's .env secrets"
    )
    init.add_argument("--env-file", default=".env", help="with --compose: where (./.env)")
    init.add_argument("--data-dir", help="data directory to write into the config")
    init.add_argument(
        "--admin-user",
        metavar="NAME",
        help="username of the first admin (default: your UNIX username); "
        "password from $WARDEN_ADMIN_PASSWORD, else asked on a terminal",
    )
    init.add_argument(
        "--admin-email", metavar="EMAIL", help="e-mail of the first admin (default: NAME@localhost)"
    )


def _add_run_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    run = commands.add_parser(
        "run", parents=[common], help="run all services in one process, or some of them"
    )
    run.add_argument(
        "services",
        nargs="+",
        metavar="SERVICE",
        choices=("all", *SERVICE_NAMES),
        help=f"`all` or any of: {', '.join(SERVICE_NAMES)}",
    )
    run.add_argument(
        "--bus",
        choices=("inproc", "amqp"),
        help="message bus (default: inproc for `all`, amqp (RabbitMQ) otherwise)",
    )
    run.add_argument(
        "--connect-wait",
        type=_seconds,
        metavar="SECONDS",
        help="at start-up, how long to keep retrying a broker or database that cannot be "
        "reached before giving up (default: 30)",
    )


def _add_db_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    database = commands.add_parser("db", parents=[common], help="database migrations")
    db_commands = database.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for action, text in (("upgrade", "apply migrations"), ("current", "show revisions")):
        sub = db_commands.add_parser(action, parents=[common], help=text)
        sub.add_argument(
            "services",
            nargs="*",
            metavar="SERVICE",
            help=f"any of {', '.join(SERVICES_WITH_DATABASE)} (default: all)",
        )


def _add_hosts_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    from services.client.hosts import add_parsers as add_host_parsers

    hosts = commands.add_parser(
        "hosts",
        parents=[common],
        help="the monitored hosts: list, add, edit, remove, check, drain, undrain",
    )
    host_commands = hosts.add_subparsers(dest="hosts_command", metavar="ACTION")  # none: list

    def local_check(check: argparse.ArgumentParser) -> None:
        check.add_argument(
            "--local",
            action="store_true",
            help="check the config file's [[hosts]] from here, without a server",
        )
        check.add_argument(
            "--timeout", type=float, default=10.0, help="seconds per host and command (10)"
        )

    add_host_parsers(host_commands, [common], local_check)


def _add_key_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    key = commands.add_parser(
        "key",
        parents=[common],
        help="print the public key users add to ~/.ssh/authorized_keys so their jobs can run",
    )
    key.add_argument(
        "--generate",
        action="store_true",
        help="make ssh.key_file (empty: the data directory's key) if missing",
    )


def _add_demo_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    demo = commands.add_parser(
        "demo",
        parents=[common],
        help="run everything against a simulated fleet (nothing to install or configure)",
    )
    demo.add_argument("--hosts", type=int, default=4, help="simulated hosts (4)")
    demo.add_argument("--gpus-per-host", type=int, default=8, help="GPUs per host (8)")
    demo.add_argument(
        "--data-dir", default=".data/demo", help="where the demo keeps its files (.data/demo)"
    )
    demo.add_argument(
        "--watch", type=float, default=10.0, help="print the GPUs every N seconds (0: never)"
    )


def _add_user_parser(commands: Commands, common: argparse.ArgumentParser) -> None:
    user = commands.add_parser(
        "user",
        parents=[common],
        help="accounts (on the reservations database; the services need not run)",
    )
    actions = user.add_subparsers(dest="user_command", required=True, metavar="ACTION")
    add = actions.add_parser(
        "add",
        parents=[common],
        help="create an account (password: $WARDEN_PASSWORD, else asked on a terminal)",
    )
    add.add_argument("username", metavar="USERNAME", help="the user's UNIX username on the hosts")
    add.add_argument("--email", required=True, help="where Warden writes to them")
    add.add_argument("--admin", action="store_true", help="may manage Warden")
    add.add_argument(
        "--group",
        dest="groups",
        action="append",
        default=[],
        metavar="GROUP",
        help="also join this group (repeatable; every user joins the default groups)",
    )
    actions.add_parser("list", parents=[common], help="every account with its roles and groups")
    invite = actions.add_parser(
        "invite",
        parents=[common],
        help="create an account and print a one-time link to choose its password",
    )
    invite.add_argument(
        "username", metavar="USERNAME", help="the user's UNIX username on the hosts"
    )
    invite.add_argument("--email", required=True, help="where Warden writes to them")
    invite.add_argument("--admin", action="store_true", help="may manage Warden")
    invite.add_argument(
        "--group",
        dest="groups",
        action="append",
        default=[],
        metavar="GROUP",
        help="also join this group (repeatable)",
    )
    for action, text in (
        ("passwd", "set a new password, to be changed at sign-in ($WARDEN_PASSWORD, else asked)"),
        ("reset", "print a new one-time link for the user to choose a password"),
        ("promote", "make an admin"),
        ("demote", "make a plain user again (never the last admin)"),
        ("deactivate", "sign the user out everywhere and refuse sign-in (history kept)"),
        ("activate", "let a deactivated user sign in again"),
        ("delete", "delete the account (reservations keep the name); needs --confirm USERNAME"),
    ):
        sub = actions.add_parser(action, parents=[common], help=text)
        sub.add_argument("username", metavar="USERNAME")
        if action == "delete":
            sub.add_argument("--confirm", metavar="USERNAME", default="", help="the username again")


def _settings(args: argparse.Namespace) -> Settings:
    from services.shared.config import load_settings

    return load_settings(getattr(args, "config", None), dev=getattr(args, "dev", False))


def cmd_init(args: argparse.Namespace) -> int:
    from services.cli_accounts import first_admin
    from services.shared.config import default_config_path, load_settings, render_config_template

    if args.compose:
        from services.shared.deploy import init_compose

        return init_compose(Path(args.env_file))
    chosen = getattr(args, "config", None) or os.environ.get("WARDEN_CONFIG")
    path = Path(chosen or default_config_path()).expanduser()
    if path.exists() and not args.force:
        print(f"{path} exists; keeping it (use --force to overwrite)")
    else:
        data_dir = Path(args.data_dir).expanduser().resolve() if args.data_dir else None
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(render_config_template(data_dir))
        path.chmod(0o600)  # it holds the JWT secret
        print(f"wrote {path}")
    settings = load_settings(path, dev=getattr(args, "dev", False))
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    from services.shared.deploy import init_key

    init_key(settings)

    async def prepare() -> None:
        await _upgrade_databases(settings, SERVICES_WITH_DATABASE)
        await first_admin(settings, args)

    asyncio.run(prepare())
    gateway = settings.gateway
    print(
        f"next: `warden run all` (or `make run`), open http://{gateway.host}:{gateway.port}, and\n"
        "      add your GPU hosts: `warden hosts add NAME --address ADDR --user USER` (after\n"
        "      `warden login`), on the Hosts page, or as [[hosts]] tables in the config\n"
        "after installing a new version of Warden, run `warden db upgrade`"
    )
    return 0


async def _upgrade_databases(settings: Settings, names: Sequence[str]) -> None:
    from services.shared.storage import db

    for name in names:
        url = settings.storage.database_url_for(name)
        engine = db.create_engine(url)
        try:
            revision = await db.upgrade(engine, name)
            print(f"{name}: at {revision}")
        except Exception as err:
            refused = db.unusable(name, url, err)
            if refused is None:
                raise
            raise refused from err
        finally:
            await engine.dispose()


def cmd_run(args: argparse.Namespace) -> int:
    from services.shared import event_loop
    from services.shared.logging import configure_logging
    from services.shared.runtime import CONNECT_WAIT_S, run_services

    settings = _settings(args)
    configure_logging(settings.log)
    names = list(SERVICE_NAMES) if "all" in args.services else list(dict.fromkeys(args.services))
    bus_kind = args.bus or ("inproc" if "all" in args.services else "amqp")
    if bus_kind == "inproc" and set(names) != set(SERVICE_NAMES):
        raise WardenError(
            "the in-process bus only connects services of one process: "
            "use `warden run all`, or --bus amqp to run some services against RabbitMQ"
        )
    log.info(
        "starting %s on the %s bus (%s event loop)",
        ", ".join(names),
        "in-process" if bus_kind == "inproc" else "RabbitMQ",
        event_loop.loop_name(),
        extra={"fields": {"config": settings.source}},
    )
    wait_s = CONNECT_WAIT_S if args.connect_wait is None else args.connect_wait
    event_loop.run(run_services(names, settings, bus_kind=bus_kind, connect_wait_s=wait_s))
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    from services.shared.logging import configure_logging
    from services.shared.storage import db

    settings = _settings(args)
    configure_logging(settings.log)
    names = args.services or list(SERVICES_WITH_DATABASE)
    unknown = sorted(set(names) - set(SERVICES_WITH_DATABASE))
    if unknown:
        raise WardenError(
            f"no database for {', '.join(unknown)} "
            f"(services with one: {', '.join(SERVICES_WITH_DATABASE)})"
        )

    async def current() -> None:
        for name in names:
            url = settings.storage.database_url_for(name)
            engine = db.create_engine(url)
            try:
                current = await db.current_revision(engine, name)
                head = db.head_revision(name)
                state = "up to date" if current == head else f"needs upgrade to {head}"
                print(f"{name}: at {current or 'nothing'} ({state})")
            except Exception as err:
                refused = db.unusable(name, url, err)
                if refused is None:
                    raise
                raise refused from err
            finally:
                await engine.dispose()

    if args.db_command == "upgrade":
        asyncio.run(_upgrade_databases(settings, names))
    else:
        asyncio.run(current())
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    """The inventory through the server (`services/client/hosts.py`), or, for `check --local`
    or `check --config FILE`, the config file's hosts checked from here."""
    if args.hosts_command == "check" and (args.local or "config" in args):
        return _check_config_hosts(args)
    from services.client.commands import guarded
    from services.client.hosts import run

    return guarded(run)(args)


def _check_config_hosts(args: argparse.Namespace) -> int:
    from services.monitor.check import check_hosts, format_table
    from services.monitor.hosts.inventory import monitored_hosts
    from services.monitor.nvml import load_nvml
    from services.shared.logging import configure_logging
    from services.shared.remote.ssh import SshOptions

    settings = _settings(args)
    configure_logging(settings.log)
    hosts = monitored_hosts(settings, local_has_nvml=load_nvml() is not None)
    if args.names:
        hosts = [host for host in hosts if host.name in args.names]
    if not hosts:
        raise WardenError(
            f"no hosts to check in {settings.source}: add [[hosts]] tables "
            "(`warden init` writes an example)"
        )
    options = SshOptions.from_settings(settings.ssh)
    results = asyncio.run(check_hosts(hosts, options, args.timeout))
    print(format_table(results))
    return 0 if all(result.ok for result in results) else 1


def cmd_key(args: argparse.Namespace) -> int:
    from services.shared.remote.ssh import authorize_command, public_key_line

    settings = _settings(args)
    if args.generate:
        from services.shared.deploy import generate_key

        generate_key(settings)
        settings = _settings(args)  # an empty ssh.key_file now means the key just made
    line = public_key_line(settings)
    print(line)
    print(
        "# each user who runs jobs adds the line above to ~/.ssh/authorized_keys on every host,"
        f"\n# e.g. by running there:\n{authorize_command(line)}",
        file=sys.stderr,
    )
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from services.reservations import seeding
    from services.shared.config import load_settings
    from services.sim.demo import DEMO_PEOPLE, DemoAccess, run_demo

    if args.hosts < 1 or args.gpus_per_host < 0:
        raise WardenError("--hosts must be at least 1 and --gpus-per-host at least 0")
    base = load_settings(getattr(args, "config", None), dev=True)
    # The sim may not reach into the reservations service; the CLI lends it these two.
    access = DemoAccess(
        accounts=lambda settings: seeding.demo_accounts(settings, DEMO_PEOPLE),
        book_past=lambda settings: (
            lambda booked_at, fields: seeding.book_as_of(settings, booked_at, **fields)
        ),
    )
    data_dir = Path(args.data_dir).resolve()
    asyncio.run(run_demo(base, data_dir, args.hosts, args.gpus_per_host, args.watch, access))
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from services.sim.cli import run_cli

    return run_cli(args)


def cmd_user(args: argparse.Namespace) -> int:
    from services.cli_accounts import cmd_user

    return cmd_user(args)


def cmd_setup_link(args: argparse.Namespace) -> int:
    from services.cli_accounts import cmd_setup_link

    return cmd_setup_link(args)


def main(argv: Sequence[str] | None = None) -> int:
    from services.client.commands import CLIENT_COMMANDS

    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(sim="sim" in argv).parse_args(argv)
    commands = {
        "init": cmd_init,
        "run": cmd_run,
        "db": cmd_db,
        "hosts": cmd_hosts,
        "key": cmd_key,
        "sim": cmd_sim,
        "demo": cmd_demo,
        "user": cmd_user,
        "setup-link": cmd_setup_link,
        **CLIENT_COMMANDS,
    }
    if args.command == "version":
        print(f"warden {__version__}")
        return 0
    try:
        return commands[args.command](args)
    except WardenError as err:
        from services.client.render import printable  # a server's words may hold anything

        # Line by line: a list of problems (the configuration's) keeps one per line.
        message = "\n".join(printable(line) for line in err.message.split("\n"))
        print(f"warden: {message}", file=sys.stderr)
        return 2 if err.code == "config_invalid" else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
