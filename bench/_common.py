"""What the benchmarks in bench/ share: the command line, latency figures, the machine they ran
on, child processes, a Warden config, databases and accounts, RabbitMQ vhosts, and printing the
table and the `RESULT` line.

The benchmarks run as `python bench/<name>.py` from a checkout: Python puts bench/ on the path,
so they `import _common`, and this module puts the repository root there for `services`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import logging
import math
import os
import platform
import resource
import secrets
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import tomllib
import uuid
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.shared import toml

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncEngine

    from services.shared.config import Settings

REPO = Path(__file__).resolve().parent.parent
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
SIM_READY = "Ctrl-C to stop"  # what `warden sim` prints once it serves
CLK_TCK = os.sysconf("SC_CLK_TCK")

T = TypeVar("T")

# The wall time print_result reports runs from here: a benchmark imports this module first.
STARTED = time.monotonic()


# --- the command line and the run -----------------------------------------------------------------


def argument_parser(doc: str | None, quick: str) -> argparse.ArgumentParser:
    """The script's parser: the first paragraph of its `doc` as description, and `--quick`, a
    smoke run of what `quick` says."""
    parser = argparse.ArgumentParser(description=(doc or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {quick}")
    return parser


def setup_logging_and_sigterm() -> None:
    """Warnings only; SIGTERM ends the run like Ctrl-C does, through every `finally` (children
    stopped, vhosts, databases and temporary folders removed)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger().setLevel(logging.WARNING)

    def exit_on(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, exit_on)


def run_async(
    main: Coroutine[Any, Any, T],
    cleaned_up: str,
    *stops: type[Exception],
    loop_factory: Callable[[], asyncio.AbstractEventLoop] | None = None,
) -> T:
    """`asyncio.run(main)` with setup_logging_and_sigterm; on Ctrl-C (or one of the `stops`) it
    says so and what the `finally` blocks `cleaned_up`, and exits with status 130.
    `loop_factory`: another event loop (a bench that runs a service in its own process passes
    `services.shared.event_loop.loop_factory()`, the loop `warden run` runs it on)."""
    setup_logging_and_sigterm()
    interrupts: tuple[type[BaseException], ...] = (KeyboardInterrupt, *stops)
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(main)
    except interrupts as err:
        print(f"interrupted ({str(err) or 'Ctrl-C'}): {cleaned_up}", file=sys.stderr)
        raise SystemExit(130) from None


# --- figures --------------------------------------------------------------------------------------


def percentile(samples: Iterable[float], p: float) -> float:
    """Nearest-rank percentile; nan when there are no samples."""
    ordered = sorted(samples)
    if not ordered:
        return float("nan")
    k = max(0, min(len(ordered) - 1, round(p / 100 * len(ordered) + 0.5) - 1))
    return ordered[k]


@dataclass
class Latencies:
    """Timings in milliseconds; every figure is nan when there are none."""

    samples_ms: list[float] = field(default_factory=list)

    def add(self, started: float) -> None:
        """One more: from `started` (time.perf_counter) to now."""
        self.samples_ms.append((time.perf_counter() - started) * 1000)

    @property
    def count(self) -> int:
        return len(self.samples_ms)

    @property
    def p50(self) -> float:
        return statistics.median(self.samples_ms) if self.samples_ms else float("nan")

    @property
    def p99(self) -> float:
        return percentile(self.samples_ms, 99)

    @property
    def max(self) -> float:
        return max(self.samples_ms, default=float("nan"))

    @property
    def mean(self) -> float:
        return statistics.fmean(self.samples_ms) if self.samples_ms else float("nan")


# --- the machine ----------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the kernel's pick)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown CPU"


def print_machine(*software: str, sharing: str = "") -> None:
    """Two lines: the machine with `software` (versions) beside Python's, and its load at the
    end of the run, with what `sharing` the cores skews."""
    versions = ", ".join([f"Python {platform.python_version()}", *software])
    print(
        f"machine: nproc={usable_cpus()} (cpu_count={os.cpu_count()}), {cpu_model()}, "
        f"{versions}, {platform.platform()}"
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load:    {load} (1/5/15 min, at the end{'; ' + sharing if sharing else ''})")


def cpu_seconds(pid: int | str = "self", thread: int | None = None) -> float:
    """User + system CPU seconds of process `pid` (all its threads), or of its `thread`, from
    /proc; nan when it is gone."""
    path = f"/proc/{pid}/stat" if thread is None else f"/proc/{pid}/task/{thread}/stat"
    try:
        with open(path) as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return float("nan")
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    """Resident memory of process `pid` in MiB (VmRSS), from /proc; nan when it is gone."""
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return float("nan")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --- child processes ------------------------------------------------------------------------------


def warden_argv(*args: str, python_opts: Iterable[str] = ()) -> list[str]:
    """`warden ARGS` of this checkout (what `.venv/bin/warden` runs), whatever is installed."""
    return [sys.executable, *python_opts, "-m", "services.cli", *args]


def child_env(home: Path) -> dict[str, str]:
    """This environment with `home` as HOME and no WARDEN_ variables: only the config counts."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WARDEN_")}
    return {**env, "HOME": str(home), "PYTHONUNBUFFERED": "1"}


def _die_with_parent() -> Callable[[], None] | None:
    """For Popen's preexec_fn: the child gets SIGTERM if the benchmark dies (Linux). libc is
    looked up here, in the parent, so the forked child runs no import."""
    try:
        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None
    pr_set_pdeathsig = 1
    return lambda: prctl(pr_set_pdeathsig, signal.SIGTERM)


def stop_process(
    process: subprocess.Popen[Any], name: str, sig: int = signal.SIGTERM, grace_s: float = 10.0
) -> None:
    """`sig`, then SIGKILL if it has not exited within `grace_s`."""
    if process.poll() is not None:
        return
    with contextlib.suppress(ProcessLookupError):
        process.send_signal(sig)
    try:
        process.wait(grace_s)
    except subprocess.TimeoutExpired:
        print(f"{name} did not stop within {grace_s:g}s: killed", flush=True)
        process.kill()
        process.wait()


class Child:
    """A process the benchmark runs in the background, in the repository, its output in `log`."""

    def __init__(self, name: str, argv: list[str], log: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log = log
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                argv,
                cwd=REPO,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the benchmark, which stops it
                preexec_fn=_die_with_parent(),
            )

    @property
    def pid(self) -> int:
        return self.process.pid

    def output(self) -> str:
        try:
            return self.log.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join("    " + line for line in self.output().splitlines()[-lines:])

    def check_alive(self) -> None:
        code = self.process.poll()
        if code is not None:
            raise RuntimeError(f"{self.name} exited with status {code}:\n{self.tail()}")

    async def wait_for_line(self, line: str, timeout_s: float) -> None:
        """Until `line` is in its output."""
        deadline = time.monotonic() + timeout_s
        while line not in self.output():
            self.check_alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.name} not ready within {timeout_s:.0f}s:\n{self.tail()}")
            await asyncio.sleep(0.1)

    def stop(self, sig: int = signal.SIGTERM, grace_s: float = 10.0) -> None:
        stop_process(self.process, self.name, sig, grace_s)


def start_sim(folder: Path, env: dict[str, str], *options: str) -> Child:
    """`warden sim OPTIONS`, writing its `[[hosts]]`, known_hosts and client key into
    folder/sim; it serves once it prints SIM_READY, then `sim_hosts(folder)` reads them."""
    snippet = folder / "sim" / "hosts.toml"
    argv = warden_argv("sim", *options, "--control-port", "0", "--write-config", str(snippet))
    return Child("warden sim", argv, folder / "sim.log", env)


def sim_hosts(folder: Path) -> tuple[Path, list[dict[str, Any]]]:
    """The known_hosts file and `[[hosts]]` entries that `start_sim(folder, ...)` wrote."""
    sim = folder / "sim"
    hosts = tomllib.loads((sim / "hosts.toml").read_text())["hosts"]
    return sim / "known_hosts", hosts


# --- a Warden config ------------------------------------------------------------------------------


def write_config(
    folder: Path,
    *,
    known_hosts: Path,
    hosts: list[dict[str, Any]] | None,
    **sections: dict[str, Any],
) -> Path:
    """folder/warden.toml: storage in folder/data, a fresh JWT secret, host keys from
    `known_hosts`, no local NVML, warnings only; `sections` add to or override those tables."""
    (folder / "data").mkdir(exist_ok=True)
    document: dict[str, Any] = {
        "log": {"level": "warning"},
        "storage": {"data_dir": str(folder / "data")},
        "auth": {"jwt_secret": secrets.token_urlsafe(48)},
        "ssh": {"known_hosts": str(known_hosts)},
        "monitor": {"local_nvml": "off"},
    }
    for name, values in sections.items():
        document[name] = {**document.get(name, {}), **values}
    document["hosts"] = hosts
    config = folder / "warden.toml"
    config.write_text(toml.dumps(document, header=f"Written by bench/{Path(sys.argv[0]).name}"))
    return config


# --- databases and accounts -----------------------------------------------------------------------
# The database layer is imported in these functions, not above: loaded into a benchmark that
# needs none (bench/scheduler.py), its objects would slow every garbage collection it times.


async def create_accounts(
    engine: AsyncEngine, users: Iterable[tuple[str, bool]], password: str
) -> None:
    """(username, is_admin) accounts with `password` in the reservations database of
    `engine`, hashed with argon2 at its cheapest: they are made in milliseconds, and so are their
    logins (a hash carries its parameters)."""
    import argon2

    from services.accounts import passwords, provisioning
    from services.accounts.provisioning import NewAccount
    from services.shared.storage.store import Store

    passwords._hasher = argon2.PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    passwords._dummy_hash.cache_clear()
    made = [NewAccount(name, f"{name}@lab.example", password, admin) for name, admin in users]
    async with Store(engine).write() as conn:
        await provisioning.create_accounts(conn, made, actor="bench")


async def prepare_databases(
    settings: Settings, users: Iterable[tuple[str, bool]], password: str
) -> None:
    """Every service's database migrated; `users` made in the reservations one."""
    from services.shared.storage import db

    for name in db.SERVICES_WITH_DATABASE:
        engine = db.create_engine(settings.storage.database_url_for(name))
        try:
            await db.upgrade(engine, name)
            if name == "reservations":
                await create_accounts(engine, users, password)
        finally:
            await engine.dispose()


# --- RabbitMQ -------------------------------------------------------------------------------------


def rabbitmqctl(*args: str, check: bool = True) -> str:
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout.strip()


def rabbitmq_version() -> str:
    try:
        return rabbitmqctl("version") or "unknown"
    except (OSError, RuntimeError, subprocess.TimeoutExpired) as err:
        return f"unknown ({err.__class__.__name__})"


@contextlib.contextmanager
def rabbitmq_vhost(url: str, prefix: str) -> Iterator[str]:
    """A fresh vhost on the broker of `url`, open to its user, made with rabbitmqctl; yields its
    URL and deletes it at the end, also on error or Ctrl-C."""
    vhost = f"{prefix}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    rabbitmqctl("add_vhost", vhost)
    try:
        parts = urlsplit(url)
        rabbitmqctl("set_permissions", "-p", vhost, parts.username or "guest", ".*", ".*", ".*")
        yield urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))
    finally:
        rabbitmqctl("delete_vhost", vhost, check=False)


# --- output ---------------------------------------------------------------------------------------


def print_table(head: Sequence[str], rows: Iterable[Sequence[str] | str], align: str) -> None:
    """`head`, a rule, then `rows`, each column as wide as its widest cell.

    `align` has a character per column: "<" left (text), ">" right (figures). A row may have
    fewer cells than `head`; a row that is a string (a sub-heading) is printed as it is.
    """
    rows = list(rows)
    widths = [len(name) for name in head]
    for row in rows:
        if not isinstance(row, str):
            for i, cell in enumerate(row):
                widths[i] = max(widths[i], len(cell))

    def line(cells: Sequence[str]) -> str:
        columns = zip(cells, align, widths, strict=False)  # a row may be short
        return "  ".join(f"{c:{a}{w}}" for c, a, w in columns).rstrip()

    lines = [row if isinstance(row, str) else line(row) for row in rows]
    print(line(head))
    print("-" * max(len(text) for text in [line(head), *lines]))
    for text in lines:
        print(text)


def verdict(met: bool, figure: float = 0.0) -> str:
    """Whether a target was met; "n/a" when the `figure` judged is nan (not measured)."""
    return "n/a" if math.isnan(figure) else ("met" if met else "MISSED")


def print_result(**figures: object) -> None:
    """After a blank line, the wall time, then the machine-readable last line:
    `RESULT key=value ...`."""
    print(f"\nwall time: {time.monotonic() - STARTED:.0f}s")
    print("RESULT " + " ".join(f"{key}={value}" for key, value in figures.items()), flush=True)
