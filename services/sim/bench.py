"""CPU cost of one probe request in the simulator: `python -m services.sim.bench`.

The simulator runs in a child process (so its CPU time is its own); this process connects
`--connections` asyncssh clients to it (one per host, as the monitor does) and runs
`--requests` probe commands one after another, then the same number with all connections busy
at once. The child's CPU time (user + system, from /proc, all threads) before and after each
phase gives the server's CPU per request. Linux only (reads /proc/PID/stat).
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import os
import signal
import time
import timeit
from multiprocessing.connection import Connection
from typing import Any

import asyncssh

from services.monitor.probe import PROBE_COMMAND
from services.sim.model import SimFleet
from services.sim.server import SimServer, raise_open_files_limit


def _child(hosts: int, gpus: int, pipe: Connection) -> None:
    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        fleet = SimFleet(hosts, gpus, seed=1, churn=True)
        started = time.perf_counter()
        async with SimServer(fleet, accept_any_key=True) as server:
            pipe.send(
                {
                    "ports": [server.ports[h] for h in fleet.hosts],
                    "known_hosts": server.known_hosts_lines(),
                    "start_s": time.perf_counter() - started,
                }
            )
            await stop.wait()

    asyncssh.set_log_level("WARNING")
    raise_open_files_limit(2 * hosts + 256)
    asyncio.run(main())


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of process `pid` (all its threads)."""
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def _measure(args: argparse.Namespace, pid: int, info: dict[str, Any]) -> dict[str, float]:
    key = asyncssh.generate_private_key("ssh-ed25519")
    known = asyncssh.import_known_hosts("\n".join(info["known_hosts"]))
    ports = info["ports"]
    conns = [
        await asyncssh.connect(
            "127.0.0.1",
            ports[i % len(ports)],
            username="bench",
            client_keys=[key],
            known_hosts=known,
            config=None,
            agent_path=None,
        )
        for i in range(args.connections)
    ]
    try:
        for conn in conns:  # warm up
            await conn.run(PROBE_COMMAND, check=True)
        cpu0, wall0 = _cpu_s(pid), time.perf_counter()
        for i in range(args.requests):
            await conns[i % len(conns)].run(PROBE_COMMAND, check=True)
        cpu1, wall1 = _cpu_s(pid), time.perf_counter()
        per_conn = args.requests // len(conns)

        async def burst(conn: asyncssh.SSHClientConnection) -> None:
            for _ in range(per_conn):
                await conn.run(PROBE_COMMAND, check=True)

        await asyncio.gather(*(burst(c) for c in conns))
        cpu2, wall2 = _cpu_s(pid), time.perf_counter()
    finally:
        for conn in conns:
            conn.close()
    concurrent = per_conn * len(conns)
    return {
        "sequential_cpu_us": (cpu1 - cpu0) / args.requests * 1e6,
        "sequential_latency_ms": (wall1 - wall0) / args.requests * 1e3,
        "concurrent_cpu_us": (cpu2 - cpu1) / concurrent * 1e6,
        "concurrent_rate_per_s": concurrent / (wall2 - wall1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--hosts", type=int, default=10)
    parser.add_argument("--gpus-per-host", type=int, default=8)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--requests", type=int, default=2000)
    args = parser.parse_args()
    raise_open_files_limit(2 * max(args.hosts, args.connections) + 256)

    fleet = SimFleet(1, args.gpus_per_host, seed=1)
    now = fleet.now()
    render_us = timeit.timeit(lambda: fleet.render_probe_output("sim-001", now), number=2000) * 500
    size = len(fleet.render_probe_output("sim-001", now))

    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    child = context.Process(target=_child, args=(args.hosts, args.gpus_per_host, theirs))
    child.start()
    try:
        if not ours.poll(300):
            raise SystemExit("the simulator did not start")
        info = ours.recv()
        assert child.pid is not None
        result = asyncio.run(_measure(args, child.pid, info))
    finally:
        child.terminate()
        child.join(30)
    print(
        f"simulator: {args.hosts} hosts x {args.gpus_per_host} GPUs, started in "
        f"{info['start_s']:.2f} s; probe output {size} bytes, rendered in {render_us:.0f} us"
    )
    print(
        f"{args.requests} sequential probes over {args.connections} connections: "
        f"{result['sequential_cpu_us']:.0f} us server CPU per request, "
        f"{result['sequential_latency_ms']:.2f} ms round trip"
    )
    print(
        f"same, all connections at once: {result['concurrent_cpu_us']:.0f} us server CPU per "
        f"request, {result['concurrent_rate_per_s']:.0f} requests/s"
    )


if __name__ == "__main__":
    main()
