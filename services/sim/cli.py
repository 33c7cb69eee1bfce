"""`warden sim`: serve a simulated fleet over SSH, and `warden sim ctl`: script it.

    warden sim --hosts 5 --gpus-per-host 8 --write-config ./sim/hosts.toml
    warden sim ctl start-process --host sim-001 --gpu 0 --user alice --command "python x.py"
    warden sim ctl hang --host sim-002 --seconds forever

`add_parser(subparsers, parents)` adds the command to `warden`'s parser; `run_cli(args)` runs
it and returns the exit status.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import asyncssh

from services.shared import toml
from services.shared.topology_shapes import SHAPES
from services.sim.control import ControlApi
from services.sim.gpu_faults import GPU_FAULTS
from services.sim.mig import parse_mig_option
from services.sim.model import DEFAULT_GPU_MODEL, GPU_MODELS, NVIDIA_SMI_MODES, SimFleet
from services.sim.server import (
    KEY_ALGORITHM,
    SimServer,
    public_key_text,
    raise_open_files_limit,
)

DEFAULT_CONTROL_PORT = 8790
CLIENT_KEY_NAME = "sim_client_ed25519"
HOST_KEY_NAME = "sim_host_ed25519"
KNOWN_HOSTS_NAME = "known_hosts"


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return number


def _port(value: str) -> int:
    number = int(value)
    if not 0 <= number <= 65535:
        raise argparse.ArgumentTypeError("must be a port number (0-65535)")
    return number


def _gpus(value: str) -> int | list[int]:
    try:
        indexes = [int(part) for part in value.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError("a GPU index, or indexes like 0,1") from None
    return indexes[0] if len(indexes) == 1 else indexes


def _mig(value: str) -> dict[int, tuple[str, ...]]:
    try:
        return parse_mig_option(value)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def _seconds(value: str) -> float | str | None:
    if value in ("off", "none", "null"):
        return None
    if value in ("forever", "inf"):
        return "forever"
    try:
        return float(value)
    except ValueError:
        raise argparse.ArgumentTypeError("a number of seconds, forever, or off") from None


def add_parser(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser],
    parents: Sequence[argparse.ArgumentParser] = (),
) -> argparse.ArgumentParser:
    """Add `sim` (and `sim ctl ACTION`) to `warden`'s sub-commands; returns the `sim` parser."""
    parents = list(parents)
    sim = subparsers.add_parser(
        "sim",
        parents=parents,
        allow_abbrev=False,  # else `ctl start-process --gpu` reads as ambiguous here
        help="serve a simulated GPU fleet over SSH (demo, tests, benchmarks)",  # = cli.SIM_HELP
        description="Serve simulated GPU hosts over real SSH, one port per host, until "
        "Ctrl-C; `warden sim ctl ...` scripts the running fleet.",
    )
    sim.add_argument("--hosts", type=_positive, default=5, help="number of hosts (default 5)")
    sim.add_argument(
        "--gpus-per-host", type=int, default=8, metavar="M", help="GPUs per host (default 8)"
    )
    sim.add_argument(
        "--port",
        type=_port,
        default=0,
        metavar="P",
        help="base SSH port: host i listens on P+i (default 0: free ports)",
    )
    sim.add_argument(
        "--address",
        default="127.0.0.1",
        help="where the SSH ports listen (default 127.0.0.1; 0.0.0.0 in a container)",
    )
    sim.add_argument(
        "--control-port",
        type=_port,
        default=DEFAULT_CONTROL_PORT,
        metavar="C",
        help=f"control API port on 127.0.0.1 (default {DEFAULT_CONTROL_PORT}; 0: a free port)",
    )
    sim.add_argument("--seed", type=int, default=0, help="same seed, same fleet (default 0)")
    sim.add_argument("--no-churn", action="store_true", help="no background jobs")
    sim.add_argument(
        "--churn-period",
        type=float,
        default=1800.0,
        metavar="S",
        help="mean seconds between background job changes on one GPU lane (default 1800)",
    )
    sim.add_argument(
        "--gpu-model", choices=sorted(GPU_MODELS), default=DEFAULT_GPU_MODEL, metavar="NAME"
    )
    sim.add_argument(
        "--mig",
        type=_mig,
        metavar="SPLIT",
        help="split GPUs of every host into MIG instances, e.g. 0:3g.40gb,3g.40gb "
        "(several GPUs: 0:3g.40gb,3g.40gb;1:7g.80gb)",
    )
    sim.add_argument(
        "--topology",
        choices=SHAPES,
        default=None,
        help="GPU interconnect `nvidia-smi topo -m` prints on every host (default pcie): "
        "nvlink-mesh, nvlink-quads (NVLink within groups of 4), nvlink-pairs, pcie",
    )
    sim.add_argument(
        "--write-config",
        metavar="PATH",
        help="write a TOML [[hosts]] snippet there, with known_hosts and a client key "
        "(accepted by the simulator) in the same folder",
    )
    sim.add_argument("--user", default="warden", help="SSH user for the written config")
    sim.add_argument(
        "--authorized-keys", metavar="FILE", help="also accept the public keys in this file"
    )
    sim.add_argument(
        "--accept-any-key",
        action="store_true",
        help="accept any client key (the default when no key is written or given)",
    )

    sim_commands = sim.add_subparsers(dest="sim_command", metavar="ctl")
    ctl = sim_commands.add_parser(
        "ctl", parents=parents, help="script a running simulator through its control API"
    )
    actions = ctl.add_subparsers(dest="sim_action", required=True, metavar="ACTION")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument(
        "--control-port",
        dest="ctl_port",
        type=_port,
        default=DEFAULT_CONTROL_PORT,
        metavar="C",
        help=f"the simulator's control port (default {DEFAULT_CONTROL_PORT})",
    )
    host_common = argparse.ArgumentParser(add_help=False)
    host_common.add_argument("--host", required=True, help="e.g. sim-001")

    def action(name: str, text: str, *, host: bool = True) -> argparse.ArgumentParser:
        extra = [common, host_common] if host else [common]
        return actions.add_parser(name, parents=[*parents, *extra], help=text)

    start = action("start-process", "start a process on a GPU; prints its pid")
    start.add_argument("--gpu", type=_gpus, required=True, help="GPU index (or 0,1)")
    start.add_argument("--user", required=True)
    # Its own dest: `warden`'s sub-command is `args.command`, which this must not overwrite.
    start.add_argument(
        "--command", dest="process_command", required=True, help="the command line ps shows"
    )
    start.add_argument("--memory-mib", type=int, default=1024, help="GPU memory it uses")
    start.add_argument(
        "--mig", type=int, metavar="DEV", help="on a split GPU: the MIG instance (MIG Dev) it uses"
    )
    stop = action("stop-process", "stop a process")
    stop.add_argument("--pid", type=int, required=True)
    hang = action("hang", "commands answer after a delay, or never")
    hang.add_argument(
        "--seconds", type=_seconds, required=True, help="seconds, `forever`, or `off`"
    )
    action("down", "refuse and drop connections")
    action("up", "accept connections again")
    smi = action("nvidia-smi", "make nvidia-smi work, vanish or fail")
    smi.add_argument("--mode", choices=NVIDIA_SMI_MODES, required=True)
    topo = action("topology", "what `nvidia-smi topo -m` prints on the host from now on")
    topo.add_argument("--shape", choices=SHAPES, required=True)
    remove = action("remove-gpu", "a GPU disappears from nvidia-smi")
    remove.add_argument("--gpu", type=int, required=True)
    split = action("split-gpu", "split a GPU into MIG instances (or end MIG mode)")
    split.add_argument("--gpu", type=int, required=True)
    split.add_argument(
        "--profiles", required=True, help="e.g. 3g.40gb,3g.40gb; `none` ends MIG mode"
    )
    fault = action("gpu-fault", "a GPU fails (lost, ecc, row_remap_pending), throttles, or heals")
    fault.add_argument("--gpu", type=int, required=True, help="its index")
    fault.add_argument(
        "--fault",
        choices=GPU_FAULTS,
        required=True,
        help="lost, ecc (uncorrectable), row_remap_pending, thermal (slowdown), pcie (x8 of "
        "x16); ok heals it",
    )
    show = action("show", "print the fleet (or one host) as JSON", host=False)
    show.add_argument("--host", help="only this host")
    return sim


def run_cli(args: argparse.Namespace) -> int:
    """Run `warden sim` (until SIGINT/SIGTERM) or `warden sim ctl ...`; the exit status."""
    if getattr(args, "sim_command", None) == "ctl":
        return asyncio.run(_ctl(args))
    return _serve(args)


# -- warden sim ctl -----------------------------------------------------------------------


def _ctl_request(args: argparse.Namespace) -> tuple[str, str, dict[str, Any] | None]:
    host = getattr(args, "host", None)
    base = f"/hosts/{host}"
    match args.sim_action:
        case "start-process":
            body = {
                "gpu": args.gpu,
                "user": args.user,
                "command": args.process_command,
                "used_memory_mib": args.memory_mib,
            }
            if args.mig is not None:
                body["mig"] = args.mig
            return "POST", f"{base}/processes", body
        case "stop-process":
            return "DELETE", f"{base}/processes/{args.pid}", None
        case "hang":
            return "POST", f"{base}/hang", {"seconds": args.seconds}
        case "down" | "up":
            return "POST", f"{base}/down", {"down": args.sim_action == "down"}
        case "nvidia-smi":
            return "POST", f"{base}/nvidia-smi", {"mode": args.mode}
        case "topology":
            return "POST", f"{base}/topology", {"shape": args.shape}
        case "remove-gpu" | "split-gpu" | "gpu-fault":
            return _gpu_request(args, f"{base}/gpus/{args.gpu}")
        case _:
            return "GET", base if host else "/fleet", None


def _gpu_request(args: argparse.Namespace, gpu: str) -> tuple[str, str, dict[str, Any] | None]:
    match args.sim_action:
        case "split-gpu":
            profiles = [] if args.profiles == "none" else args.profiles.split(",")
            return "POST", f"{gpu}/mig", {"profiles": profiles}
        case "gpu-fault":
            return "POST", f"{gpu}/fault", {"fault": args.fault}
        case _:
            return "POST", f"{gpu}/remove", None


async def _ctl(args: argparse.Namespace) -> int:
    import aiohttp

    method, path, body = _ctl_request(args)
    url = f"http://127.0.0.1:{args.ctl_port}{path}"
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as session,
            session.request(method, url, json=body) as response,
        ):
            text = await response.text()
            status = response.status
    except aiohttp.ClientError as err:
        print(
            f"warden sim: cannot reach the control API at {url} ({err}); is `warden sim` "
            "running with that --control-port?",
            file=sys.stderr,
        )
        return 1
    try:
        answer = json.loads(text)
    except json.JSONDecodeError:
        answer = {"message": text}
    if status >= 400:
        print(f"warden sim: {answer.get('message', text)} (HTTP {status})", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


# -- warden sim ---------------------------------------------------------------------------


def _key(path: Path) -> asyncssh.SSHKey:
    """Read the private key at `path`, or make one there (with its .pub) the first time."""
    if path.exists():
        return asyncssh.read_private_key(str(path))
    key = asyncssh.generate_private_key(KEY_ALGORITHM, comment=f"warden-sim {path.name}")
    key.write_private_key(str(path))
    path.chmod(0o600)
    key.write_public_key(str(path) + ".pub")
    return key


def render_hosts_toml(hosts: Sequence[dict[str, Any]], known_hosts: Path, command: str) -> str:
    header = (
        f"Simulated fleet written by `{command}`;\n"
        "rewritten on every start (free ports change). SSH host keys for these hosts:\n"
        f"  [ssh] known_hosts = {toml.value(str(known_hosts))}"
    )
    keys = ("name", "address", "port", "user", "key_file")
    return toml.dumps({"hosts": [{k: host[k] for k in keys} for host in hosts]}, header=header)


def _command_line(args: argparse.Namespace) -> str:
    words = ["warden sim", f"--hosts {args.hosts}", f"--gpus-per-host {args.gpus_per_host}"]
    words += [f"--port {args.port}", f"--seed {args.seed}"]
    if getattr(args, "topology", None):
        words.append(f"--topology {args.topology}")
    return " ".join(words)


def _port_summary(server: SimServer) -> str:
    ports = [server.ports[h] for h in server.fleet.hosts if h in server.ports]
    if ports and ports == list(range(ports[0], ports[0] + len(ports))):
        return f"ports {ports[0]}-{ports[-1]}" if len(ports) > 1 else f"port {ports[0]}"
    if len(ports) <= 10:
        return ", ".join(f"{h}={p}" for h, p in server.ports.items())
    return f"{len(ports)} free ports (see --write-config)"


def _serve(args: argparse.Namespace) -> int:  # noqa: C901 - starts the fleet, its SSH server and control API, stops them
    asyncssh.set_log_level(logging.WARNING)  # asyncssh logs every channel at INFO
    raise_open_files_limit(2 * args.hosts + 256)
    try:
        fleet = SimFleet(
            args.hosts,
            args.gpus_per_host,
            args.seed,
            churn=not args.no_churn,
            churn_period_s=args.churn_period,
            gpu_model=args.gpu_model,
            topology=args.topology,
        )
        for name in fleet.hosts:
            for index, profiles in (args.mig or {}).items():
                fleet.split_gpu(name, index, profiles)
    except Exception as err:  # InvalidRequest, NotFound: a bad option
        print(f"warden sim: {err}", file=sys.stderr)
        return 2
    authorized: list[asyncssh.SSHKey | str | Path] = []
    host_key: asyncssh.SSHKey | None = None
    config_path: Path | None = None
    client_key_path: Path | None = None
    try:
        if args.authorized_keys:
            for line in Path(args.authorized_keys).expanduser().read_text().splitlines():
                if line.strip() and not line.lstrip().startswith("#"):
                    authorized.append(line.strip())
        if args.write_config:
            config_path = Path(args.write_config).expanduser().resolve()
            config_path.parent.mkdir(parents=True, exist_ok=True)
            client_key_path = config_path.parent / CLIENT_KEY_NAME
            authorized.append(public_key_text(_key(client_key_path)))
            host_key = _key(config_path.parent / HOST_KEY_NAME)  # known_hosts stays valid
    except (OSError, ValueError, asyncssh.KeyImportError) as err:
        print(f"warden sim: {err}", file=sys.stderr)
        return 1
    accept_any = args.accept_any_key or not authorized
    server = SimServer(
        fleet,
        address=args.address,
        base_port=args.port,
        host_key=host_key,
        authorized_keys=authorized,
        accept_any_key=accept_any,
    )

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await server.start()
        except OSError as err:
            print(f"warden sim: cannot listen for SSH: {err}", file=sys.stderr)
            return 1
        control = ControlApi(server, port=args.control_port)
        try:
            try:
                await control.start()
            except OSError as err:
                print(f"warden sim: cannot listen for control: {err}", file=sys.stderr)
                return 1
            churn = "off" if args.no_churn else f"every ~{args.churn_period:g} s per GPU lane"
            print(
                f"warden sim: {len(fleet.hosts)} hosts x {args.gpus_per_host} GPUs "
                f"({args.gpu_model}, seed {args.seed}, churn {churn})"
            )
            print(f"  SSH on {server.address}, {_port_summary(server)}")
            print(f"  control API {control.url} (`warden sim ctl --help`)")
            print("  client keys: " + ("any" if accept_any else f"{len(authorized)} accepted"))
            if config_path is not None and client_key_path is not None:
                known_hosts = config_path.parent / KNOWN_HOSTS_NAME
                known_hosts.write_text("\n".join(server.known_hosts_lines()) + "\n")
                hosts = server.hosts_config(args.user, client_key_path)
                config_path.write_text(render_hosts_toml(hosts, known_hosts, _command_line(args)))
                print(f"  wrote {config_path}, {known_hosts}, client key {client_key_path}")
            print("Ctrl-C to stop", flush=True)
            await stop.wait()
        finally:
            await control.close()
            await server.close()
        print(f"warden sim: stopped after {server.requests} commands")
        return 0

    return asyncio.run(main())


__all__ = ["add_parser", "render_hosts_toml", "run_cli"]
