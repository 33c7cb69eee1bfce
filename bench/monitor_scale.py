"""How far one monitor process scales: N simulated hosts x 8 GPUs, polled every 5 s over SSH.

Usage::

    .venv/bin/python bench/monitor_scale.py [--quick] [--sizes 10,100,500,1000]

For each fleet size N (default 10, 100, 500, 1,000 hosts; --quick: 10 and 50):

1. `warden sim --hosts N --gpus-per-host 8` in its own process (churn on: processes come and
   go), on free ports; it writes `[[hosts]]` TOML, known_hosts and a client key into a
   temporary folder. Ready when it prints "Ctrl-C to stop". (`warden` is run as
   `python -m services.cli` from this checkout: what `.venv/bin/warden` runs here.)
2. A full warden.toml there (data_dir in the folder, [monitor] interval_s, [ssh] known_hosts,
   local_nvml = "off", the simulator's [[hosts]]); `warden db upgrade monitor`.
3. `warden run monitor` in its own process, on RabbitMQ (its own vhost, made with rabbitmqctl
   and deleted at the end), as in production. Its events go to the `monitor.events` exchange;
   no queue is bound to it here, so the broker confirms and drops them (publishing cost is
   real, routing/storing is not).
4. From this process an `AmqpBus` client calls `monitor.stats`: once the monitor answers, a
   warm-up of 2 intervals (--quick: 1; the first polls include SSH handshakes), then
   `{"reset": true}`, M intervals (4; --quick: 3) of measurement, then `monitor.stats` again.
   CPU % of the monitor and the simulator over that window come from /proc/PID/stat (utime +
   stime, all threads; the monitor's main thread, which runs the event loop, also on its own),
   the monitor's RSS from /proc/PID/status (VmRSS) at the end.

Sample age (from the monitor's stats) is the time from a host's scheduled tick to its events
being published (confirmed by the broker): what a consumer of `host.sampled` sees as staleness.
Missed ticks are ticks a poll loop could not even start within their interval.

Both processes are stopped (SIGTERM, then SIGKILL) and the vhost and temporary folder removed,
also on error or Ctrl-C. The last line is machine-readable, for the largest N run:
`RESULT hosts=<n> gpus=<n> p99_sample_age_ms=<n> missed_ticks=<n> monitor_cpu_percent=<n>`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import logging
import os
import platform
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

# Runnable as a plain script from a checkout: the repository root holds `services`.
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from services.shared.bus.amqp import AmqpBus
from services.shared.errors import WardenError

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
GPUS_PER_HOST = 8
WARMUP_INTERVALS = 2

TARGET_HOSTS = 1_000
TARGET_INTERVAL_S = 5.0
TARGET_P99_MS = 1_000.0

READY_LINE = "Ctrl-C to stop"
OWN_ENV = ("WARDEN_BUS_AMQP_URL", "WARDEN_AUTH_JWT_SECRET")


# --- RabbitMQ vhost (as bench/bus_throughput.py) ------------------------------------------------


def _rabbitmqctl(*args: str, check: bool = True) -> str:
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    done = subprocess.run([ctl, "-q", *args], capture_output=True, text=True, timeout=120)
    if check and done.returncode != 0:
        raise RuntimeError(
            f"rabbitmqctl {' '.join(args)} failed: {done.stderr.strip() or done.stdout.strip()}"
        )
    return done.stdout.strip()


def _with_vhost(url: str, vhost: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + quote(vhost, safe="")))


# --- processes ----------------------------------------------------------------------------------


def warden_command() -> list[str]:
    """`warden` of this checkout (what `.venv/bin/warden` runs), whatever is installed."""
    return [sys.executable, "-m", "services.cli"]


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it if this benchmark dies (Linux only)."""
    with contextlib.suppress(Exception):
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Child:
    """A process started by the benchmark, its output in a log file."""

    def __init__(self, name: str, argv: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.name = name
        self.log_path = log_path
        self._log = log_path.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the benchmark, which stops them
            preexec_fn=_die_with_parent,
        )
        self.pid = self.proc.pid

    def output(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def tail(self, lines: int = 15) -> str:
        return "\n".join(self.output().splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise RuntimeError(
                f"{self.name} exited with status {self.proc.returncode}:\n{self.tail()}"
            )

    def stop(self, grace_s: float = 10.0) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    self.proc.kill()
                self.proc.wait(5)
        self._log.close()


CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int, tid: int | None = None) -> float:
    """User + system CPU seconds of process `pid` (all its threads), or of its thread `tid`."""
    path = f"/proc/{pid}/stat" if tid is None else f"/proc/{pid}/task/{tid}/stat"
    with open(path) as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


# --- one fleet size -------------------------------------------------------------------------------


@dataclass
class Row:
    hosts: int
    gpus: int
    interval_s: float
    intervals: int
    seconds: float  # measured window (between the two stats calls)
    polls: int
    failures: int
    missed_ticks: int
    samples: int
    p50_ms: float | None
    p99_ms: float | None
    max_ms: float | None
    monitor_cpu: float
    monitor_loop_cpu: float  # its main thread: the event loop
    monitor_rss_mib: float
    sim_cpu: float
    warmup: dict[str, Any]
    startup_s: dict[str, float]

    @property
    def expected_polls(self) -> int:
        return self.hosts * self.intervals

    @property
    def expected_pps(self) -> float:
        return self.hosts / self.interval_s

    @property
    def pps(self) -> float:
        return self.polls / self.seconds if self.seconds else 0.0


async def wait_for_line(child: Child, line: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while line not in child.output():
        child.check_alive()
        if time.monotonic() > deadline:
            raise RuntimeError(f"{child.name} not ready within {timeout:.0f}s:\n{child.tail()}")
        await asyncio.sleep(0.1)


async def wait_for_monitor(bus: AmqpBus, child: Child, hosts: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        child.check_alive()
        try:
            answer = await bus.call("monitor", "stats", {}, timeout=2)
        except WardenError:
            if time.monotonic() > deadline:
                raise RuntimeError(
                    f"the monitor did not answer within {timeout:.0f}s:\n{child.tail()}"
                ) from None
            await asyncio.sleep(0.2)
            continue
        if answer.get("hosts") != hosts:
            raise RuntimeError(f"the monitor watches {answer.get('hosts')} hosts, not {hosts}")
        return


def write_config(tmp: Path, interval_s: float, *, with_hosts: bool) -> Path:
    """warden.toml in `tmp`: storage there, [monitor], and the simulator's [[hosts]]."""
    sim_dir = tmp / "sim"
    config = tmp / "warden.toml"
    config.write_text(
        "# Written by bench/monitor_scale.py\n"
        "[log]\n"
        'level = "info"\n\n'
        "[storage]\n"
        f"data_dir = {json.dumps(str(tmp / 'data'))}\n\n"
        "[ssh]\n"
        f"known_hosts = {json.dumps(str(sim_dir / 'known_hosts'))}\n\n"
        "[monitor]\n"
        f"interval_s = {interval_s}\n"
        'local_nvml = "off"\n\n' + ((sim_dir / "hosts.toml").read_text() if with_hosts else "")
    )
    return config


async def migrate(warden: list[str], config: Path, env: dict[str, str]) -> float:
    """`warden db upgrade monitor`; returns the seconds it took."""
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *warden,
        "db",
        "upgrade",
        "monitor",
        "--config",
        str(config),
        cwd=ROOT,
        env=env,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        _, stderr = await asyncio.wait_for(proc.communicate(), 120)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    if proc.returncode != 0:
        raise RuntimeError(f"warden db upgrade monitor failed:\n{stderr.decode()[-2000:]}")
    return time.monotonic() - started


async def run_size(
    n: int, interval_s: float, intervals: int, warmup_intervals: int, url: str, verbose: bool
) -> Row:
    tmp = Path(tempfile.mkdtemp(prefix=f"warden-monitor-scale-{n}-"))
    children: list[Child] = []
    bus: AmqpBus | None = None
    env = {
        **os.environ,
        "WARDEN_BUS_AMQP_URL": url,
        "WARDEN_AUTH_JWT_SECRET": secrets.token_urlsafe(36),  # 48 characters
        "PYTHONUNBUFFERED": "1",
    }
    for key in list(env):  # only what this benchmark sets comes from the environment
        if key.startswith("WARDEN_") and key not in OWN_ENV:
            del env[key]
    warden = warden_command()
    startup: dict[str, float] = {}
    try:
        (tmp / "data").mkdir()
        t0 = time.monotonic()
        sim = Child(
            "the simulator",
            [
                *warden,
                "sim",
                "--hosts",
                str(n),
                "--gpus-per-host",
                str(GPUS_PER_HOST),
                "--port",
                "0",
                "--control-port",
                "0",
                "--write-config",
                str(tmp / "sim" / "hosts.toml"),
            ],
            tmp / "sim.log",
            env,
        )
        children.append(sim)
        # The migration needs no hosts: it runs while the simulator starts.
        migrating = asyncio.create_task(
            migrate(warden, write_config(tmp, interval_s, with_hosts=False), env)
        )
        try:
            await wait_for_line(sim, READY_LINE, timeout=60 + n * 0.1)
            startup["sim"] = time.monotonic() - t0
        finally:
            startup["migrate"] = await migrating
        config = write_config(tmp, interval_s, with_hosts=True)

        bus = AmqpBus(url, name=f"bench-monitor-scale-{os.getpid()}")
        await bus.start()
        t0 = time.monotonic()
        monitor = Child(
            "the monitor",
            [*warden, "run", "monitor", "--config", str(config)],
            tmp / "monitor.log",
            env,
        )
        children.append(monitor)
        await wait_for_monitor(bus, monitor, n, timeout=60)
        startup["monitor"] = time.monotonic() - t0

        await asyncio.sleep(warmup_intervals * interval_s)
        sim.check_alive()
        monitor.check_alive()
        warmup = await bus.call("monitor", "stats", {"reset": True}, timeout=10)
        started = time.monotonic()
        mon_cpu0, sim_cpu0 = cpu_s(monitor.pid), cpu_s(sim.pid)
        loop_cpu0 = cpu_s(monitor.pid, monitor.pid)

        await asyncio.sleep(intervals * interval_s)

        figures = await bus.call("monitor", "stats", {}, timeout=10)
        seconds = time.monotonic() - started
        mon_cpu1, sim_cpu1 = cpu_s(monitor.pid), cpu_s(sim.pid)
        loop_cpu1 = cpu_s(monitor.pid, monitor.pid)
        rss = rss_mib(monitor.pid)
        sim.check_alive()
        monitor.check_alive()
        if verbose:
            print(f"--- monitor log (N={n}), last lines:\n{monitor.tail(10)}", flush=True)
        ages = figures["sample_age_ms"]
        return Row(
            hosts=n,
            gpus=n * GPUS_PER_HOST,
            interval_s=interval_s,
            intervals=intervals,
            seconds=seconds,
            polls=figures["polls"],
            failures=figures["failures"],
            missed_ticks=figures["missed_ticks"],
            samples=ages["count"],
            p50_ms=ages["p50"],
            p99_ms=ages["p99"],
            max_ms=ages["max"],
            monitor_cpu=(mon_cpu1 - mon_cpu0) / seconds * 100,
            monitor_loop_cpu=(loop_cpu1 - loop_cpu0) / seconds * 100,
            monitor_rss_mib=rss,
            sim_cpu=(sim_cpu1 - sim_cpu0) / seconds * 100,
            warmup=warmup,
            startup_s=startup,
        )
    finally:
        if bus is not None:
            with contextlib.suppress(Exception):
                await bus.close()
        for child in reversed(children):  # the monitor first, then the simulator
            child.stop()
        shutil.rmtree(tmp, ignore_errors=True)


# --- report ---------------------------------------------------------------------------------------


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.0f}"


def verdict(ok: bool) -> str:
    return "PASS" if ok else "MISS"


def report(rows: list[Row], args: argparse.Namespace, rmq_version: str) -> None:
    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:
        usable = os.cpu_count() or 1
    print()
    print(
        f"machine: nproc={usable} (cpu_count={os.cpu_count()}), Python "
        f"{platform.python_version()}, RabbitMQ {rmq_version}, {platform.platform()}"
    )
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load:    {load} (1/5/15 min, at the end; monitor, simulator and RabbitMQ share it)")
    print(
        f"setup:   `warden sim` + `warden run monitor` (RabbitMQ, own vhost) in two processes; "
        f"warm-up {args.warmup} interval(s), then {args.intervals} measured; "
        "events published to monitor.events with no queue bound (broker drops them)"
    )
    print()
    head = (
        f"{'hosts':>6} {'gpus':>6} {'int s':>5} {'polls/s exp':>11} {'polls/s got':>11} "
        f"{'polls':>11} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} {'missed':>6} {'fail':>5} "
        f"{'mon CPU%':>8} {'mon RSS MiB':>11} {'sim CPU%':>8}"
    )
    print(head)
    print("-" * len(head))
    for r in rows:
        polls = f"{r.polls}/{r.expected_polls}"
        print(
            f"{r.hosts:>6,} {r.gpus:>6,} {r.interval_s:>5g} {r.expected_pps:>11.1f} "
            f"{r.pps:>11.1f} {polls:>11} {_ms(r.p50_ms):>7} {_ms(r.p99_ms):>7} "
            f"{_ms(r.max_ms):>7} {r.missed_ticks:>6} {r.failures:>5} {r.monitor_cpu:>8.0f} "
            f"{r.monitor_rss_mib:>11.0f} {r.sim_cpu:>8.0f}"
        )
    print(
        "(sample age: scheduled tick -> events published; CPU %: of one core, over the "
        "measured window; 'polls' achieved/expected = hosts x intervals)"
    )
    print("side figures:")
    for r in rows:
        w = r.warmup
        wages = w.get("sample_age_ms", {})
        s = r.startup_s
        print(
            f"  N={r.hosts:<5} start-up: sim {s.get('sim', 0):.1f}s, migrate "
            f"{s.get('migrate', 0):.1f}s, monitor {s.get('monitor', 0):.1f}s; warm-up: "
            f"{w.get('polls')} polls, {w.get('failures')} failures, "
            f"{w.get('missed_ticks')} missed, p99 {_ms(wages.get('p99'))} ms, "
            f"max {_ms(wages.get('max'))} ms; monitor CPU: event loop {r.monitor_loop_cpu:.0f}%, "
            f"other threads {r.monitor_cpu - r.monitor_loop_cpu:.0f}%"
        )
    print()
    target = [r for r in rows if r.hosts >= TARGET_HOSTS and r.interval_s <= TARGET_INTERVAL_S]
    print(
        f"targets: {TARGET_HOSTS:,} hosts x {GPUS_PER_HOST} GPUs every {TARGET_INTERVAL_S:g}s, "
        f"p99 sample age < {TARGET_P99_MS:,.0f} ms, no missed ticks"
    )
    if not target:
        print(f"  not run (largest N here: {max(r.hosts for r in rows):,})")
    for r in target:
        p99_ok = r.p99_ms is not None and r.p99_ms < TARGET_P99_MS
        all_polled = r.polls >= r.expected_polls * 0.98 and r.failures == 0
        print(
            f"  N={r.hosts:,}: p99 {_ms(r.p99_ms)} ms {verdict(p99_ok)}; missed ticks "
            f"{r.missed_ticks} {verdict(r.missed_ticks == 0)}; polls {r.polls}/"
            f"{r.expected_polls}, failures {r.failures} {verdict(all_polled)}"
        )
    print()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="smoke run: N=10 and 50, 1 + 3 intervals")
    ap.add_argument("--sizes", help="comma-separated host counts (default 10,100,500,1000)")
    ap.add_argument("--interval", type=float, default=5.0, help="monitor interval_s (5)")
    ap.add_argument("--intervals", type=int, help="measured intervals (4; --quick: 3)")
    ap.add_argument(
        "--warmup", type=int, help=f"warm-up intervals ({WARMUP_INTERVALS}; --quick: 1)"
    )
    ap.add_argument("--amqp-url", default=DEFAULT_AMQP_URL, help="broker (a vhost is made on it)")
    ap.add_argument("-v", "--verbose", action="store_true", help="show the monitor's log tail")
    args = ap.parse_args(argv)
    if args.sizes:
        args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    else:
        args.sizes = [10, 50] if args.quick else [10, 100, 500, 1000]
    if args.intervals is None:
        args.intervals = 3 if args.quick else 4
    if args.warmup is None:
        args.warmup = 1 if args.quick else WARMUP_INTERVALS
    return args


def _sigterm(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


async def run_all(args: argparse.Namespace, url: str) -> list[Row]:
    rows = []
    for n in args.sizes:
        print(f"N={n:,} hosts x {GPUS_PER_HOST} GPUs, interval {args.interval:g}s ...", flush=True)
        row = await run_size(n, args.interval, args.intervals, args.warmup, url, args.verbose)
        print(
            f"  polls {row.polls}/{row.expected_polls}, p99 {_ms(row.p99_ms)} ms, missed "
            f"{row.missed_ticks}, failures {row.failures}, monitor CPU {row.monitor_cpu:.0f}%",
            flush=True,
        )
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    signal.signal(signal.SIGTERM, _sigterm)
    ctl = shutil.which("rabbitmqctl") or "/usr/sbin/rabbitmqctl"
    asking_version = subprocess.Popen(  # beside the vhost set-up: each call starts an Erlang VM
        [ctl, "-q", "version"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
    )
    vhost = f"warden-bench-monitor-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    _rabbitmqctl("add_vhost", vhost)
    try:
        user = urlsplit(args.amqp_url).username or "guest"
        _rabbitmqctl("set_permissions", "-p", vhost, user, ".*", ".*", ".*")
        try:
            rmq_version = asking_version.communicate(timeout=60)[0].strip() or "unknown"
        except subprocess.TimeoutExpired:
            asking_version.kill()
            rmq_version = "unknown (timed out)"
        rows = asyncio.run(run_all(args, _with_vhost(args.amqp_url, vhost)))
    except KeyboardInterrupt:
        print("interrupted: processes stopped, vhost and temporary files removed", file=sys.stderr)
        return 130
    finally:
        _rabbitmqctl("delete_vhost", vhost, check=False)
    report(rows, args, rmq_version)
    last = max(rows, key=lambda r: r.hosts)
    p99 = "nan" if last.p99_ms is None else f"{last.p99_ms:.0f}"
    print(
        f"RESULT hosts={last.hosts} gpus={last.gpus} p99_sample_age_ms={p99} "
        f"missed_ticks={last.missed_ticks} monitor_cpu_percent={last.monitor_cpu:.0f}"
    )
    sys.stdout.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
