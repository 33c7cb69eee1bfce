"""`warden hosts list|add|edit|remove|check|drain|undrain`: the inventory of hosts over the
API (admins only, `/inventory/hosts`). A change is polled within one interval, without a restart.

`add` checks the host first and shows its host key's fingerprint and the GPUs found; a key
not trusted yet is accepted only when the admin says so (the prompt, `--accept-host-key
SHA256:...` that must match, or `--yes`). `remove` says what it does and asks first. Without a
terminal to ask on, either refuses unless told on the command line.

`drain` and `undrain` (maintenance windows) are in `services.client.maintenance`.

(`warden hosts check --local` / `--config FILE` checks a config file's [[hosts]] without a
server: `services.cli`.)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import quote

from rich.table import Table

from services.client import maintenance
from services.client.api import Api, ClientError
from services.client.args import UsageError, json_flag
from services.client.columns import Column, fitted_table
from services.client.output import console, print_json
from services.client.render import NONE, WIDE, printable
from services.client.session import stored_api

PATH = "/inventory/hosts"


class Refused(ClientError):
    """Nothing was changed: the admin's confirmation was needed (or did not match)."""


def _path(name: str) -> str:
    return f"{PATH}/{quote(name, safe='')}"


# --- output ------------------------------------------------------------------------------------


HOST_COLUMNS = (
    Column("HOST"),
    Column("ADDRESS", 12),
    Column("USER", 8),
    Column("PROBE"),
    Column("LABELS", 8),
    Column("HOST KEY"),
    Column("SOURCE"),
)


def hosts_table(hosts: list[Mapping[str, Any]], width: int = WIDE) -> Table:
    rows = []
    for host in hosts:
        where = f"{host['address']}:{host['port']}" if host["probe"] == "ssh" else "local (NVML)"
        key = "accepted" if host.get("host_key") else "known_hosts"
        rows.append(
            [
                str(host["name"]),
                where,
                str(host["user"] or NONE),
                str(host["probe"]),
                ",".join(host["labels"]) or NONE,
                key if host["probe"] == "ssh" else NONE,
                str(host["source"]),
            ]
        )
    return fitted_table(HOST_COLUMNS, rows, width)


def check_lines(name: str, check: Mapping[str, Any]) -> list[str]:
    """What a check found, in words: the key, the GPUs, whether the login writes the
    violation warning on terminals, ok or why not."""
    lines = []
    key = check.get("host_key")
    if key:
        lines.append(f"host key of {name}: {key['fingerprint']} ({key['status']})")
    gpus = check.get("gpus") or []
    for gpu in gpus:
        lines.append(f"  GPU {gpu['index']}: {gpu['name']} ({gpu['uuid']})")
    terminals = check.get("terminals")
    if terminals:  # (null: not asked, the login failed)
        writes = "ok" if terminals.get("ok") else "NO"
        lines.append(f"terminal warnings: {writes}, {terminals.get('detail')}")
    state = "ok" if check.get("ok") else "FAILED"
    lines.append(f"{state}: {check.get('detail')}" + (f", {len(gpus)} GPU(s)" if gpus else ""))
    return [printable(line) for line in lines]


# --- asking ------------------------------------------------------------------------------------

Ask = Callable[[str], bool]


def ask_on_terminal(question: str) -> bool:
    try:
        return input(f"{question} [y/N] ").strip().lower() in ("y", "yes")
    except EOFError:
        return False


def _interactive() -> bool:
    return sys.stdin.isatty()


def accepted_key(
    name: str, check: Mapping[str, Any], args: argparse.Namespace, ask: Ask
) -> str | None:
    """The key line to trust for `name` (None: known_hosts trusts it already); Refused when
    the admin did not accept it."""
    key = check.get("host_key")
    if key is None:
        raise Refused(f"cannot check {name}: {check.get('detail')}")
    if key["status"] == "trusted":
        return None
    if key["status"] == "changed":
        raise Refused(f"{name}: {check.get('detail')}")
    wanted = args.accept_host_key
    if wanted:
        if wanted != key["fingerprint"]:
            raise Refused(
                f"{name} presents the host key {key['fingerprint']}, not {wanted}: not trusted"
            )
        return str(key["line"])
    if args.yes:
        return str(key["line"])
    if not _interactive():
        raise Refused(
            f"the host key of {name} is new: check it (on the host: `ssh-keygen -lf "
            f"/etc/ssh/ssh_host_ed25519_key.pub`), then pass --accept-host-key "
            f"{key['fingerprint']} (or --yes)"
        )
    if not ask("Trust this host key?"):
        raise Refused(f"{name}: host key not trusted, nothing changed")
    return str(key["line"])


# --- commands ----------------------------------------------------------------------------------


def _fields(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for key in ("address", "port", "user", "key_file", "probe"):
        value = getattr(args, key, None)
        if value is not None:
            body[key] = value
    if getattr(args, "no_labels", False):
        body["labels"] = []
    elif getattr(args, "labels", None):
        body["labels"] = args.labels
    return body


def cmd_list(args: argparse.Namespace, api: Api) -> int:
    answer = api.get(PATH)
    if getattr(args, "json", False):
        print_json(answer)
        return 0
    hosts = answer.get("hosts") or []
    if not hosts:
        print("no hosts yet: add one with `warden hosts add NAME --address ADDR --user USER`")
        return 0
    out = console()
    out.print(hosts_table(hosts, out.width))
    return 0


def cmd_add(args: argparse.Namespace, api: Api, ask: Ask) -> int:
    body = {"name": args.name, **_fields(args)}
    if body.get("probe", "ssh") == "ssh" and not (args.address and args.user):
        raise UsageError("--address and --user are needed (the host is logged in to over SSH)")
    check = api.post(f"{PATH}/check", {k: v for k, v in body.items() if k != "labels"})
    for line in check_lines(args.name, check):
        print(line)
    if check.get("host_key") is None and body.get("probe", "ssh") == "ssh" and args.yes:
        print(f"adding {args.name} anyway (--yes): it shows unreachable until it answers")
        key = None
    elif body.get("probe", "ssh") == "ssh":
        key = accepted_key(args.name, check, args, ask)
    else:
        key = None
    if key is not None:
        body["host_key"] = key
    added = api.post(PATH, body)
    if args.json:
        print_json(added)
    else:
        print(f"added {args.name}: polled within one interval (`warden status` shows it)")
    return 0


def cmd_edit(args: argparse.Namespace, api: Api) -> int:
    body = _fields(args)
    if not body:
        raise UsageError("nothing to change: give --address, --port, --user, --label, ...")
    changed = api.request("PATCH", _path(args.name), body=body)
    if args.json:
        print_json(changed)
    else:
        print(f"changed {args.name}: polled with the new settings from now on")
        if {"address", "port"} & set(body):
            print(f"(moved to another machine? check its key: warden hosts check {args.name})")
    return 0


def cmd_remove(args: argparse.Namespace, api: Api, ask: Ask) -> int:
    host = api.get(_path(args.name))
    where = f" ({host['address']}:{host['port']})" if host.get("address") else ""
    print(
        printable(
            f"removing {args.name}{where} stops monitoring it now: no more polls, gone from "
            "the dashboard; its reservations and history stay, and it is not added again "
            "from [[hosts]] at the next start"
        )
    )
    if not args.yes:
        if not _interactive():
            raise Refused(f"{args.name} not removed: pass --yes to remove it without a prompt")
        if not ask(f"Remove {args.name}?"):
            raise Refused(f"{args.name} not removed")
    removed = api.delete(_path(args.name))
    if args.json:
        print_json(removed)
    else:
        print(f"removed {args.name}")
    return 0


def cmd_check(args: argparse.Namespace, api: Api, ask: Ask) -> int:
    if not args.names:
        hosts = (api.get(PATH).get("hosts")) or []
        if not hosts:
            print("no hosts yet: add one with `warden hosts add`")
            return 0
        args.names = [host["name"] for host in hosts]
    failed = False
    for name in args.names:
        check = api.post(f"{_path(name)}/check", {})
        if args.json:
            print_json({"name": name, **check})
        else:
            for line in check_lines(name, check):
                print(line)
        key = check.get("host_key")
        if key and key["status"] == "new" and len(args.names) == 1:
            accepted = accepted_key(name, check, args, ask)
            if accepted is not None:
                api.request("PATCH", _path(name), body={"host_key": accepted})
                print(f"trusted the host key of {name}: polled with it from now on")
                continue
        failed = failed or not check.get("ok")
    return 1 if failed else 0


def run(args: argparse.Namespace, ask: Ask = ask_on_terminal) -> int:
    api = stored_api()
    action = args.hosts_command or "list"  # `warden hosts` alone lists them
    if action == "list":
        return cmd_list(args, api)
    if action == "add":
        return cmd_add(args, api, ask)
    if action == "edit":
        return cmd_edit(args, api)
    if action == "remove":
        return cmd_remove(args, api, ask)
    if action == "drain":
        return maintenance.cmd_drain(args, api)
    if action == "undrain":
        return maintenance.cmd_undrain(args, api)
    return cmd_check(args, api, ask)


# --- parsers -----------------------------------------------------------------------------------


def _host_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--address", help="name or address to reach it at")
    parser.add_argument("--port", type=int, help="SSH port (22)")
    parser.add_argument("--user", help="the user Warden logs in as")
    parser.add_argument(
        "--key-file", help="private key on the head node (default: the agent's keys)"
    )
    parser.add_argument(
        "--probe", choices=("ssh", "nvml"), help="ssh (default), or nvml: this machine"
    )
    parser.add_argument(
        "--label", dest="labels", action="append", metavar="LABEL", help="a group (repeatable)"
    )


def _trust_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--accept-host-key",
        metavar="SHA256:...",
        help="trust the host's key if its fingerprint is this one (as `ssh-keygen -lf` shows)",
    )
    parser.add_argument("--yes", "-y", action="store_true", help="do not ask")


def add_parsers(
    actions: Any, common: list[argparse.ArgumentParser], local_check: Callable[[Any], None]
) -> None:
    """`warden hosts ACTION`; `local_check` adds the options of the server-less check."""
    listing = actions.add_parser("list", parents=common, help="the hosts Warden watches")
    json_flag(listing)

    add = actions.add_parser(
        "add", parents=common, help="check a host, show its key and GPUs, then add it"
    )
    add.add_argument("name", metavar="NAME")
    _host_options(add)
    _trust_options(add)
    json_flag(add)

    edit = actions.add_parser("edit", parents=common, help="change a host's settings")
    edit.add_argument("name", metavar="NAME")
    _host_options(edit)
    edit.add_argument("--no-labels", action="store_true", help="remove every label")
    json_flag(edit)

    remove = actions.add_parser("remove", parents=common, help="stop watching a host")
    remove.add_argument("name", metavar="NAME")
    remove.add_argument("--yes", "-y", action="store_true", help="do not ask")
    json_flag(remove)

    check = actions.add_parser(
        "check",
        parents=common,
        help="log in to hosts: host key, nvidia-smi, GPUs (a new key: offers to trust it)",
        description="Through the server (every host, or NAME). With --local or --config: the "
        "config file's [[hosts]], checked from here without a server.",
    )
    check.add_argument("names", nargs="*", metavar="NAME")
    _trust_options(check)
    json_flag(check)
    local_check(check)
    maintenance.add_host_parsers(actions, common)
