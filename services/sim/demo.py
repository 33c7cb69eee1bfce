"""`warden demo`: every service in one process, watching a simulated fleet served over real SSH.

Nothing to install or configure: it writes its own config, key and known_hosts under a demo
data dir, starts the simulator on free ports, migrates, gives the demo's accounts new random
passwords and prints them with the URL, runs `warden run all` with those hosts, seeds a
lived-in week (`demo_seed`) and prints what `monitor.snapshot()` sees every few seconds.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shlex
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from services.monitor import api as monitor_api
from services.shared import toml
from services.shared.bus import Bus
from services.shared.bus.inproc import InProcessBus
from services.shared.cluster.background import cancel_and_wait
from services.shared.config import Settings, load_settings
from services.shared.errors import WardenError
from services.shared.logging import configure_logging
from services.shared.runtime import run_services
from services.shared.storage import db
from services.sim.demo_seed import ADMIN, ALICE, BOB, BookPast, seed_week
from services.sim.model import SimFleet
from services.sim.server import SimServer

log = logging.getLogger("warden.demo")

# Who the demo signs in as: (username, is_admin), the admin first.
DEMO_PEOPLE = ((ADMIN, True), (ALICE, False), (BOB, False))
# Notify only, and again later: the demo's violation stays open for everyone to look at.
DEMO_STEPS = ["0s terminal offender", "10m terminal offender+owner"]


@dataclass(frozen=True)
class DemoAccess:
    """What the CLI lends the demo to write in the reservations database (the sim may not
    import a service's insides): the accounts with new passwords, and past bookings."""

    accounts: Callable[[Settings], Awaitable[dict[str, str]]]
    book_past: Callable[[Settings], BookPast]


def _client_key(data_dir: Path) -> tuple[Path, asyncssh.SSHKey]:
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / "demo_key"
    if path.exists():
        key = asyncssh.read_private_key(str(path))
    else:
        key = asyncssh.generate_private_key("ssh-ed25519")
        key.write_private_key(str(path))
        path.chmod(0o600)
    return path, key


def _write_config(data_dir: Path, server: SimServer, key_file: Path, interval_s: float) -> Path:
    known_hosts = data_dir / "known_hosts"
    known_hosts.write_text("\n".join(server.known_hosts_lines()) + "\n")
    secret_file = data_dir / "jwt_secret"
    if not secret_file.exists():
        secret_file.write_text(secrets.token_urlsafe(48))
        secret_file.chmod(0o600)
    document = {
        "storage": {"data_dir": str(data_dir)},
        "auth": {"jwt_secret": secret_file.read_text().strip()},
        "ssh": {"known_hosts": str(known_hosts)},
        "monitor": {"interval_s": interval_s, "local_nvml": "off"},
        "violations": {"steps": DEMO_STEPS},
        "hosts": server.hosts_config("demo", key_file),
    }
    path = data_dir / "warden.toml"
    path.write_text(
        toml.dumps(document, header="Written by `warden demo`; rewritten at every start.")
    )
    return path


def format_snapshot(snapshot: dict[str, Any]) -> str:
    """A compact table of what the monitor sees: one line per GPU, its processes and users."""
    lines = [f"{'HOST':<9} {'GPU':>3} {'UTIL':>5} {'MEMORY':>15} {'TEMP':>5}  PROCESSES"]
    for host in snapshot["hosts"]:
        sample = host.get("sample")
        if not host["reachable"] or sample is None:
            reason = host.get("down_reason") or "not polled yet"
            lines.append(f"{host['name']:<9}   -  unreachable: {reason}")
            continue
        by_gpu: dict[str, list[str]] = {}
        for process in host["processes"]:
            by_gpu.setdefault(process["gpu_uuid"], []).append(
                f"{process['user'] or '?'}:{process['pid']}"
            )
        for gpu in sample["gpus"]:
            util = _figure(gpu["utilization_gpu_percent"], "%")
            used, total = gpu["memory_used_mib"], gpu["memory_total_mib"]
            memory = f"{used:.0f}/{total:.0f} MiB" if used is not None and total else "n/a"
            temp = _figure(gpu["temperature_c"], "C")
            users = " ".join(by_gpu.get(gpu["uuid"], [])) or "-"
            lines.append(
                f"{host['name']:<9} {gpu['index']:>3} {util:>5} {memory:>15} {temp:>5}  {users}"
            )
    return "\n".join(lines)


def _figure(value: float | None, unit: str) -> str:
    return "n/a" if value is None else f"{value:.0f}{unit}"


def warden_command() -> str:
    """How this `warden` was started (`.venv/bin/warden` under make), for commands to copy."""
    program = sys.argv[0] if sys.argv else ""
    return shlex.quote(program) if Path(program).name == "warden" else "warden"


def login_block(url: str, passwords: dict[str, str], config: Path) -> str:
    """The sign-in block printed at every start: the URL, then `  user / password` lines."""
    width = max(len(name) for name in passwords)
    admins = {name for name, is_admin in DEMO_PEOPLE if is_admin}
    rule = "=" * 72
    lines = [rule, f"Sign in at {url} as any of (new passwords at every start):"]
    for name, password in passwords.items():
        role = "  (admin)" if name in admins else ""
        lines.append(f"  {name:<{width}} / {password}{role}")
    command = warden_command()
    lines += [
        "Add someone to this demo (the demo's own database, not another):",
        f"  {command} user add NAME --email NAME@localhost --config {shlex.quote(str(config))}",
        rule,
    ]
    return "\n".join(lines)


def login_line(url: str, passwords: dict[str, str]) -> str:
    """The same logins on one line, printed under every GPU table."""
    people = ", ".join(f"{name} / {password}" for name, password in passwords.items())
    return f"Sign in at {url} as {people}"


async def _print_snapshots(bus: Bus, every_s: float, footer: str) -> None:
    await asyncio.sleep(min(every_s, 3.0))
    while True:
        try:
            snapshot = await monitor_api.SNAPSHOT.call(bus)
        except WardenError as err:
            print(f"(monitor not answering yet: {err.message})", flush=True)
        else:
            print("\n" + format_snapshot(snapshot) + "\n" + footer, flush=True)
        await asyncio.sleep(every_s)


async def _seed(bus: Bus, fleet: SimFleet, data_dir: Path, book_past: BookPast) -> None:
    try:
        summary = await seed_week(bus, fleet, data_dir, book_past)
    except WardenError as err:
        summary = f"the demo data was not all added: {err.message}"
    print(summary, flush=True)


async def run_demo(
    base: Settings,
    data_dir: Path,
    hosts: int,
    gpus_per_host: int,
    watch_s: float,
    access: DemoAccess,
) -> None:
    key_file, key = await asyncio.to_thread(_client_key, data_dir)
    fleet = SimFleet(hosts, gpus_per_host, seed=0, churn=True, churn_period_s=120.0)
    async with SimServer(fleet, authorized_keys=[key.convert_to_public()]) as server:
        config = _write_config(data_dir, server, key_file, interval_s=2.0)
        settings = load_settings(config)
        configure_logging(base.log)
        for name in db.SERVICES_WITH_DATABASE:
            engine = db.create_engine(settings.storage.database_url_for(name))
            try:
                await db.upgrade(engine, name)
            finally:
                await engine.dispose()
        passwords = await access.accounts(settings)
        gateway = f"http://{settings.gateway.host}:{settings.gateway.port}"
        print(
            f"Warden demo: {hosts} simulated hosts x {gpus_per_host} GPUs over SSH "
            f"(ports {min(server.ports.values())}-{max(server.ports.values())}).\n"
            f"Health: {gateway}/api/v1/health   Config: {config}\n"
            f"{login_block(gateway, passwords, config)}\n"
            "Live GPUs below, from monitor.snapshot(); Ctrl-C stops.",
            flush=True,
        )
        bus = InProcessBus()
        tasks = [asyncio.create_task(_seed(bus, fleet, data_dir, access.book_past(settings)))]
        if watch_s > 0:
            footer = login_line(gateway, passwords)
            tasks.append(asyncio.create_task(_print_snapshots(bus, watch_s, footer)))
        try:
            await run_services(
                ["monitor", "reservations", "jobs", "violations", "gateway"],
                settings,
                bus_kind="inproc",
                bus=bus,
            )
        finally:
            for task in tasks:
                await cancel_and_wait(task)
