"""The `warden` command."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from services import SERVICE_NAMES, __version__
from services.shared import db
from services.shared.config import (
    Settings,
    default_config_path,
    load_settings,
    render_config_template,
)
from services.shared.errors import WardenError
from services.shared.logging import configure_logging

log = logging.getLogger("warden.cli")


def _common() -> argparse.ArgumentParser:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--config",
        default=argparse.SUPPRESS,
        help=f"config file (default: $WARDEN_CONFIG or {default_config_path()})",
    )
    common.add_argument(
        "--dev",
        action="store_true",
        default=argparse.SUPPRESS,
        help="development mode: accept a missing or placeholder secret",
    )
    return common


def build_parser() -> argparse.ArgumentParser:
    common = _common()
    parser = argparse.ArgumentParser(
        prog="warden", description="GPU cluster manager for ML teams.", parents=[common]
    )
    parser.add_argument("--version", action="version", version=f"warden {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    init = commands.add_parser(
        "init", parents=[common], help="write a commented config file with every option"
    )
    init.add_argument("--force", action="store_true", help="overwrite an existing file")
    init.add_argument("--data-dir", help="data directory to write into the config")

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

    database = commands.add_parser("db", parents=[common], help="database migrations")
    db_commands = database.add_subparsers(dest="db_command", required=True, metavar="ACTION")
    for action, text in (("upgrade", "apply migrations"), ("current", "show revisions")):
        sub = db_commands.add_parser(action, parents=[common], help=text)
        sub.add_argument(
            "services",
            nargs="*",
            metavar="SERVICE",
            help=f"any of {', '.join(db.SERVICES_WITH_DATABASE)} (default: all)",
        )

    hosts = commands.add_parser("hosts", parents=[common], help="the monitored hosts")
    host_commands = hosts.add_subparsers(dest="hosts_command", required=True, metavar="ACTION")
    check = host_commands.add_parser(
        "check", parents=[common], help="log in to every host and look for nvidia-smi and GPUs"
    )
    check.add_argument(
        "--timeout", type=float, default=10.0, help="seconds per host and command (10)"
    )

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

    from services.monitor.sim.cli import add_parser as add_sim_parser

    add_sim_parser(commands, [common])

    commands.add_parser("version", parents=[common], help="print the version")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    return load_settings(getattr(args, "config", None), dev=getattr(args, "dev", False))


def cmd_init(args: argparse.Namespace) -> int:
    chosen = getattr(args, "config", None) or os.environ.get("WARDEN_CONFIG")
    path = Path(chosen or default_config_path()).expanduser()
    if path.exists() and not args.force:
        print(f"{path} exists; keeping it (use --force to overwrite)")
        return 0
    data_dir = Path(args.data_dir).expanduser().resolve() if args.data_dir else None
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_config_template(data_dir))
    path.chmod(0o600)  # it holds the JWT secret
    settings = load_settings(path)
    settings.storage.data_dir.mkdir(parents=True, exist_ok=True)
    print(f"wrote {path}")
    print("next: `warden db upgrade`, then `warden run all` (or `make run`)")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from services.shared.runtime import run_services

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
        "starting %s on the %s bus",
        ", ".join(names),
        "in-process" if bus_kind == "inproc" else "RabbitMQ",
        extra={"fields": {"config": settings.source}},
    )
    asyncio.run(run_services(names, settings, bus_kind=bus_kind))
    return 0


def cmd_db(args: argparse.Namespace) -> int:
    settings = _settings(args)
    configure_logging(settings.log)
    names = args.services or list(db.SERVICES_WITH_DATABASE)
    unknown = sorted(set(names) - set(db.SERVICES_WITH_DATABASE))
    if unknown:
        raise WardenError(
            f"no database for {', '.join(unknown)} "
            f"(services with one: {', '.join(db.SERVICES_WITH_DATABASE)})"
        )

    async def act() -> None:
        for name in names:
            engine = db.create_engine(settings.storage.database_url_for(name))
            try:
                if args.db_command == "upgrade":
                    revision = await db.upgrade(engine, name)
                    print(f"{name}: at {revision}")
                else:
                    current = await db.current_revision(engine, name)
                    head = db.head_revision(name)
                    state = "up to date" if current == head else f"needs upgrade to {head}"
                    print(f"{name}: at {current or 'nothing'} ({state})")
            finally:
                await engine.dispose()

    asyncio.run(act())
    return 0


def cmd_hosts(args: argparse.Namespace) -> int:
    from services.monitor.check import check_hosts, format_table
    from services.monitor.fleet import SshOptions
    from services.monitor.inventory import monitored_hosts
    from services.monitor.nvml import load_nvml

    settings = _settings(args)
    configure_logging(settings.log)
    hosts = monitored_hosts(settings, local_has_nvml=load_nvml() is not None)
    if not hosts:
        raise WardenError(
            f"no hosts to check in {settings.source}: add [[hosts]] tables "
            "(`warden init` writes an example)"
        )
    options = SshOptions.from_settings(settings.monitor)
    results = asyncio.run(check_hosts(hosts, options, args.timeout))
    print(format_table(results))
    return 0 if all(result.ok for result in results) else 1


def cmd_demo(args: argparse.Namespace) -> int:
    from services.monitor.demo import run_demo

    if args.hosts < 1 or args.gpus_per_host < 0:
        raise WardenError("--hosts must be at least 1 and --gpus-per-host at least 0")
    base = load_settings(getattr(args, "config", None), dev=True)
    asyncio.run(
        run_demo(base, Path(args.data_dir).resolve(), args.hosts, args.gpus_per_host, args.watch)
    )
    return 0


def cmd_sim(args: argparse.Namespace) -> int:
    from services.monitor.sim.cli import run_cli

    return run_cli(args)


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    commands = {
        "init": cmd_init,
        "run": cmd_run,
        "db": cmd_db,
        "hosts": cmd_hosts,
        "sim": cmd_sim,
        "demo": cmd_demo,
    }
    if args.command == "version":
        print(f"warden {__version__}")
        return 0
    try:
        return commands[args.command](args)
    except WardenError as err:
        print(f"warden: {err.message}", file=sys.stderr)
        return 2 if err.code == "config_invalid" else 1
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
