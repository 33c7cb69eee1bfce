"""A whole Warden for the web UI's browser tests and benchmark: `warden run all` (its own OS
process) serving the built UI, against a simulated fleet served over real SSH.

    python -m tests.e2e.web_system [--hosts 2] [--gpus 4] [--spare-hosts 0] [--fresh]
                                   [--interval 0.5] [--port 0] [--ssh-signup]

prints one JSON line, `{"url", "control", "data_dir", "hosts", "spare_hosts", "log"}`, once
the gateway answers: `url` is the UI and API, `control` the simulator's control API (start a
foreign process, take a host down: services/sim/control.py), `hosts` the simulated hosts of the
config's `[[hosts]]`. `spare_hosts` are more simulated hosts served over SSH but neither in the
config nor in known_hosts, for adding through the UI or API: each `{name, address, port, user,
key_file}` (its key is "new" to Warden until someone trusts it). The accounts admin, alice and bob
exist (password `pw-12345678`), unless `--fresh`: then no account exists, the databases are
migrated by `warden db upgrade` as `make run` does, and `log` (the file `warden run all` writes
its output to) holds what it tells a newcomer. Both commands run with standard input not a
terminal. It runs until SIGTERM, SIGINT or its standard input closes, then stops `warden run
all` and the fleet.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
import tempfile
from pathlib import Path

import aiohttp

from services.sim.control import ControlApi
from services.sim.model import SimFleet
from tests.support.config import write_config
from tests.support.fleet import ServedFleet, served_fleet
from tests.support.ports import free_port
from tests.support.system import system_settings

REPO = Path(__file__).resolve().parents[2]
STARTUP_S = 90.0


async def _gateway_answers(url: str, process: asyncio.subprocess.Process) -> None:
    deadline = asyncio.get_running_loop().time() + STARTUP_S
    async with aiohttp.ClientSession() as session:
        while asyncio.get_running_loop().time() < deadline:
            if process.returncode is not None:
                raise SystemExit(f"warden run all exited with {process.returncode}")
            with contextlib.suppress(aiohttp.ClientError):
                async with session.get(f"{url}/api/v1/gpus", allow_redirects=False) as answer:
                    if answer.status == 401:  # up, and asking who we are
                        return
            await asyncio.sleep(0.3)
    raise SystemExit(f"the gateway did not answer at {url} within {STARTUP_S:.0f} s")


async def _until_stopped() -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    # The parent (a test runner) dying closes our standard input.
    loop.add_reader(sys.stdin.fileno(), lambda: sys.stdin.buffer.read1(4096) or stop.set())
    await stop.wait()


def _spare_only_unknown(served: ServedFleet, configured: int) -> list[dict[str, object]]:
    """Leave the hosts after the first `configured` out of known_hosts (their key is new to
    Warden); their connection details."""
    lines = served.server.known_hosts_lines()
    served.known_hosts.write_text("".join(f"{line}\n" for line in lines[:configured]))
    return served.hosts()[configured:]


async def _warden(log: Path, data_dir: Path, *args: str) -> asyncio.subprocess.Process:
    """`warden ARGS` with its output appended to `log`, its standard input not a terminal."""
    with log.open("ab") as out:
        return await asyncio.create_subprocess_exec(
            str(Path(sys.executable).with_name("warden")),
            *args,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=out,
            stderr=out,
            cwd=REPO,
            env={**os.environ, "HOME": str(data_dir)},
        )


async def run(args: argparse.Namespace, data_dir: Path) -> None:
    fleet = SimFleet(args.hosts + args.spare_hosts, args.gpus, seed=7, churn=args.churn)
    async with (
        served_fleet(fleet, data_dir) as served,
        ControlApi(served.server, port=0) as control,
    ):
        spare = _spare_only_unknown(served, args.hosts)
        port = args.port or free_port()
        sections = {
            **served.config(),
            "hosts": served.hosts()[: args.hosts],
            "gateway": {
                "port": port,
                "frontend_dir": args.frontend_dir,
                # The browser tests sign in many times from one address.
                "login_failures_per_ip": 1000,
            },
            "monitor": {"interval_s": args.interval},
            "jobs": {"poll_interval_s": 0.5},
            "violations": {"steps": ["0s terminal offender"]},
        }
        if args.default_steps:  # every channel, as `warden init` writes them
            sections["violations"] = {}
        if args.ssh_signup:
            sections["auth"] = {"ssh_signup": True}
        log = data_dir / "warden.log"
        if args.fresh:
            config = str(write_config(data_dir / "warden.toml", **sections))
            upgrade = await _warden(log, data_dir, "db", "upgrade", "--config", config)
            if await upgrade.wait():
                raise SystemExit(f"warden db upgrade failed: see {log}")
        else:
            config = (await system_settings(data_dir, served, **sections)).source
        process = await _warden(log, data_dir, "run", "all", "--config", config)
        try:
            url = f"http://127.0.0.1:{port}"
            await _gateway_answers(url, process)
            ready = {"url": url, "control": control.url, "data_dir": str(data_dir)}
            configured = list(fleet.hosts)[: args.hosts]
            print(
                json.dumps({**ready, "hosts": configured, "spare_hosts": spare, "log": str(log)}),
                flush=True,
            )
            await _until_stopped()
        finally:
            if process.returncode is None:
                process.terminate()
                try:
                    await asyncio.wait_for(process.wait(), 30)
                except TimeoutError:
                    process.kill()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=2)
    parser.add_argument("--gpus", type=int, default=4, help="GPUs per host")
    parser.add_argument(
        "--spare-hosts", type=int, default=0, help="more hosts served but not in the config"
    )
    parser.add_argument(
        "--fresh", action="store_true", help="no accounts: what a newcomer starts with"
    )
    parser.add_argument("--interval", type=float, default=0.5, help="monitor poll interval (s)")
    parser.add_argument("--port", type=int, default=0, help="gateway port (0: a free one)")
    parser.add_argument("--churn", action="store_true", help="background jobs come and go")
    parser.add_argument(
        "--default-steps",
        action="store_true",
        help="Warden's default escalation steps (terminal, e-mail, chat), not the terminal alone",
    )
    parser.add_argument(
        "--ssh-signup", action="store_true", help="[auth] ssh_signup = true (self-signup)"
    )
    parser.add_argument("--data-dir", default="", help="default: a new temporary folder")
    parser.add_argument("--frontend-dir", default=str(REPO / "frontend" / "dist"))
    args = parser.parse_args()
    args.frontend_dir = str(Path(args.frontend_dir).resolve())
    data_dir = Path(args.data_dir or tempfile.mkdtemp(prefix="warden-web-")).resolve()
    data_dir.mkdir(parents=True, exist_ok=True)
    asyncio.run(run(args, data_dir))


if __name__ == "__main__":
    main()
