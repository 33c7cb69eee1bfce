"""`warden demo`: every service in one process, watching a simulated fleet served over real SSH.

Nothing to install or configure: it writes its own config, key and known_hosts under a demo
data dir, starts the simulator on free ports, migrates, runs `warden run all` with those hosts,
and prints what `monitor.snapshot()` sees every few seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
from pathlib import Path
from typing import Any

import asyncssh

from services.monitor import api as monitor_api
from services.shared import db, toml
from services.shared.bus import Bus
from services.shared.bus.inproc import InProcessBus
from services.shared.config import Settings, load_settings
from services.shared.errors import WardenError
from services.shared.logging import configure_logging
from services.shared.runtime import run_services
from services.sim.model import SimFleet
from services.sim.server import SimServer

log = logging.getLogger("warden.demo")


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


async def _print_snapshots(bus: Bus, every_s: float) -> None:
    await asyncio.sleep(min(every_s, 3.0))
    while True:
        try:
            snapshot = await monitor_api.SNAPSHOT.call(bus)
        except WardenError as err:
            print(f"(monitor not answering yet: {err.message})", flush=True)
        else:
            print("\n" + format_snapshot(snapshot), flush=True)
        await asyncio.sleep(every_s)


async def run_demo(
    base: Settings, data_dir: Path, hosts: int, gpus_per_host: int, watch_s: float
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
        gateway = f"http://{settings.gateway.host}:{settings.gateway.port}"
        print(
            f"Warden demo: {hosts} simulated hosts x {gpus_per_host} GPUs over SSH "
            f"(ports {min(server.ports.values())}-{max(server.ports.values())}).\n"
            f"Health: {gateway}/api/v1/health   Config: {config}\n"
            "Live GPUs below, from monitor.snapshot(); Ctrl-C stops.",
            flush=True,
        )
        bus = InProcessBus()
        printer = asyncio.create_task(_print_snapshots(bus, watch_s)) if watch_s > 0 else None
        try:
            await run_services(
                ["monitor", "reservations", "jobs", "violations", "gateway"],
                settings,
                bus_kind="inproc",
                bus=bus,
            )
        finally:
            if printer is not None:
                printer.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await printer
