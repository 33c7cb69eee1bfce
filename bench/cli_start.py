"""How long `warden` takes to start: the researchers' client installed alone (the
gpu-warden-client wheel, `bin/build-client`, in a clean virtual environment) and the server's
`warden` of this checkout (.venv), for commands that need no server.

Usage::

    .venv/bin/python bench/cli_start.py [--quick] [--runs N]

Each command runs N times (default 20, --quick: 5) after one warm-up run, as a shell would run
it: a new process from `exec` to exit, its wall time and peak memory (from wait4). Commands:
`warden --version`, `warden --help`, `warden status --help`, and `warden status` against a
port where nothing listens (the client's whole path: arguments, the stored login, one refused
connection, the error). Target: the client alone starts in < 300 ms (median of its slowest
command). The last line: `RESULT cli_start_ms=<n> ...`.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _common as common

TARGET_MS = 300.0
COMMANDS = (
    ("--version",),
    ("--help",),
    ("status", "--help"),
    ("status",),
)


def client_install(folder: Path) -> Path:
    """The client's wheel built from this checkout, in a fresh venv; its `warden`."""
    dist = folder / "dist"
    build = [sys.executable, str(common.REPO / "bin/build-client"), "--outdir", str(dist)]
    subprocess.run(build, check=True, capture_output=True)
    (wheel,) = dist.glob("gpu_warden_client-*.whl")
    venv = folder / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin/python"), "-m", "pip", "install", "--quiet", str(wheel)]
    subprocess.run(pip, check=True, capture_output=True)
    return venv / "bin/warden"


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall ms, peak MiB) of one run of `argv`, its output thrown away."""
    started = time.perf_counter()
    child = subprocess.Popen(
        argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    _pid, _status, usage = os.wait4(child.pid, 0)
    wall_ms = (time.perf_counter() - started) * 1000
    child.returncode = 0  # reaped by wait4
    return wall_ms, usage.ru_maxrss / 1024


def measure(warden: Path, runs: int, env: dict[str, str], cwd: Path) -> list[list[str]]:
    rows = []
    for command in COMMANDS:
        argv = [str(warden), *command]
        timed(argv, env, cwd)  # warm-up: the page cache, the .pyc files
        samples = [timed(argv, env, cwd) for _ in range(runs)]
        walls = sorted(wall for wall, _ in samples)
        rows.append(
            [
                "warden " + " ".join(command),
                f"{statistics.median(walls):.0f}",
                f"{walls[-1]:.0f}",
                f"{max(mib for _, mib in samples):.0f}",
            ]
        )
    return rows


def main() -> None:
    parser = common.argument_parser(__doc__, "5 runs of each command")
    parser.add_argument("--runs", type=int, default=0, help="runs of each command (20)")
    args = parser.parse_args()
    runs = args.runs or (5 if args.quick else 20)
    with tempfile.TemporaryDirectory(prefix="warden-cli-start-") as tmp:
        folder = Path(tmp)
        env = {
            **common.child_env(folder / "home"),
            "WARDEN_SERVER": f"http://127.0.0.1:{common.free_port()}",
        }
        client = measure(client_install(folder), runs, env, folder)
        server = measure(common.REPO / ".venv/bin/warden", runs, env, folder)
    print(f"`warden` from exec to exit, {runs} runs each (ms: median, slowest; peak RSS MiB)\n")
    head = ["install", "command", "median ms", "max ms", "MiB"]
    rows = [["client alone", *row] for row in client] + [["server", *row] for row in server]
    common.print_table(head, rows, "<<>>>")
    slowest = max(float(row[1]) for row in client)
    print(f"\nclient alone, slowest command's median: {slowest:.0f} ms (target < {TARGET_MS:.0f})")
    print(f"verdict: {common.verdict(slowest < TARGET_MS, slowest)}")
    common.print_machine(sharing="2 cores shared with other work: upper figures")
    common.print_result(
        cli_start_ms=f"{slowest:.0f}",
        client_version_ms=client[0][1],
        client_mib=max(int(row[3]) for row in client),
        server_version_ms=server[0][1],
        server_status_help_ms=server[2][1],
    )


if __name__ == "__main__":
    main()
