"""Monitor sharding: N simulated hosts x 8 GPUs split over two monitor replicas, sample age,
and how long one replica's hosts stay stale when it is killed with SIGKILL.

Usage::

    .venv/bin/python bench/_monitor_sharding.py [--quick] [--hosts 2000] [--interval 5]

(`bench/scale_out.py` calls `measure_monitor_sharding` for its monitor part.)

1. `warden sim --hosts N --gpus-per-host 8` in its own process (churn on), as
   bench/monitor_scale.py runs it; `warden db upgrade monitor` on the PostgreSQL database.
2. Two `warden run monitor` processes on RabbitMQ and that database, default `[replicas]`
   (heartbeat 2 s, dead after 6 s). This process follows their heartbeats (`replica.heartbeat`:
   each says its id, role, hosts and its own RPC queue) and waits until both are `active` and
   their hosts add up to N.
3. Warm-up (3 intervals: the first one has every SSH handshake; --quick: 1), then until each
   replica says (heartbeat `details.standby`) that its standby connections are open, to the
   hosts it would take over (`standby_open_s`: from the replicas' start), each replica's
   stats reset, M intervals measured (4; --quick: 2), each replica's stats again. Sample age
   is the time from a host's tick to its events being published; the p99 given is the larger
   of the two replicas' p99s, which bounds the p99 over both. CPU of each replica, of the
   simulator, of RabbitMQ and PostgreSQL (all their users) from /proc over that window; each
   replica's resident memory at its end.
4. Failover: this process subscribes to `host.sampled`, kills one replica with SIGKILL and
   waits until every host that replica polled (rendezvous hashing over the two ids:
   `services/monitor/shards.py`) has a sample taken after the kill. `monitor_failover_s` is the
   kill to the arrival here of the last of those samples; `failover_taken_over_s` the kill to
   the survivor's log line that it took them over, `failover_half_fresh_s` and
   `failover_p90_fresh_s` to the arrival of half and 90 % of them. The figures measured so far
   are printed before the kill; when the hosts are not all fresh within 120 s, how many are not.
5. Rejoin: the killed replica is started again; once the hosts are split again, the samples of
   the next intervals are placed in each host's tick slots: two in one slot is a double poll, a
   slot skipped is a gap. Counted, with the seconds from the start to the split.

Processes are stopped at the end (SIGTERM, then SIGKILL); run alone, the vhost, the database
and the temporary folder are removed too. Last line:
`RESULT hosts=<n> p99_sample_age_ms=<n> monitor_failover_s=<n> ...`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import math
import os
import shutil
import signal
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import _common as common

from services.monitor.shards import owner, phase
from services.shared.bus.amqp import AmqpBus
from services.shared.contracts import Envelope

GPUS_PER_HOST = 8
TARGET_HOSTS = 2_000
TARGET_P99_MS = 1_000.0
TARGET_FAILOVER_S = 10.0
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def _asyncpg_url(url: str, database: str | None = None) -> str:
    parts = urlsplit(url)
    path = f"/{database}" if database else parts.path
    return urlunsplit(parts._replace(scheme="postgresql+asyncpg", path=path))


class Heartbeats:
    """The monitor replicas as their heartbeats say them."""

    def __init__(self) -> None:
        self.replicas: dict[str, dict[str, Any]] = {}

    async def heard(self, envelope: Envelope) -> None:
        data = envelope.data
        if data["role"] == "stopping":
            self.replicas.pop(data["replica"], None)
        else:
            self.replicas[data["replica"]] = {**data, "heard": time.monotonic()}

    def active(self, pids: set[int]) -> dict[int, dict[str, Any]]:
        """pid -> heartbeat of the active replicas among `pids`, heard within 6 s."""
        found = {}
        for replica, data in self.replicas.items():
            pid = int(replica.rsplit(":", 1)[1].split("-", 1)[0])
            if pid in pids and data["role"] == "active" and time.monotonic() - data["heard"] < 6:
                found[pid] = data
        return found


class Samples:
    """host.sampled events: when each arrived here, and their tick slots."""

    def __init__(self, interval_s: float) -> None:
        self.interval_s = interval_s
        self.arrivals: list[tuple[float, str, float]] = []  # (arrived, host, sampled_at)

    async def heard(self, envelope: Envelope) -> None:
        at = datetime.fromisoformat(envelope.data["sampled_at"]).timestamp()
        self.arrivals.append((time.time(), envelope.data["host"], at))

    def first_after(self, hosts: set[str], since: float) -> dict[str, float]:
        """host -> when (arrival, Unix time) its first sample taken after `since` came."""
        first: dict[str, float] = {}
        for arrived, host, at in self.arrivals:
            if host in hosts and at > since and host not in first:
                first[host] = arrived
        return first

    def fresh_after(self, hosts: set[str], since: float) -> float | None:
        """When (arrival, Unix time) the last of `hosts` had a sample taken after `since`."""
        first = self.first_after(hosts, since)
        return max(first.values()) if len(first) == len(hosts) else None

    def slot_faults(self, since: float, until: float) -> tuple[int, int]:
        """(double polls, gaps) among the samples taken between `since` and `until`."""
        slots: dict[str, list[int]] = defaultdict(list)
        for _, host, at in self.arrivals:
            if since < at <= until:
                offset = phase(host, self.interval_s)
                slots[host].append(math.floor((at - offset + 0.05) / self.interval_s))
        doubles = gaps = 0
        for values in slots.values():
            values.sort()
            doubles += len(values) - len(set(values))
            gaps += sum(1 for a, b in itertools.pairwise(values) if b - a > 1)
        return doubles, gaps


def _server_cpu_seconds() -> dict[str, float]:
    """CPU seconds of RabbitMQ and of every PostgreSQL process (shared with whatever else
    runs on this machine)."""
    found = {"rabbitmq": 0.0, "postgresql": 0.0}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name = (entry / "comm").read_text().strip()
            key = "rabbitmq" if name == "beam.smp" else "postgresql" if name == "postgres" else ""
            if key:
                found[key] += common.cpu_seconds(int(entry.name))
        except (OSError, ValueError):
            continue
    return found


async def _until(check: Any, what: str, timeout: float, *children: common.Child) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        for child in children:
            child.check_alive()
        found = check()
        if found:
            return found
        if time.monotonic() > deadline:
            tails = "\n".join(f"{c.name}:\n{c.tail()}" for c in children)
            raise RuntimeError(f"{what}: not within {timeout:.0f}s\n{tails}")
        await asyncio.sleep(0.2)


async def _run(cmd: list[str], env: dict[str, str]) -> None:
    proc = await asyncio.create_subprocess_exec(
        *cmd, cwd=common.REPO, env=env, stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 120)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd[-4:])} failed:\n{err.decode()[-2000:]}")


async def measure_monitor_sharding(
    workdir: Path, *, hosts: int, interval_s: float, amqp_url: str, pg_url: str, quick: bool
) -> dict[str, Any]:
    """The figures of one run (see the module's doc); `pg_url` names the database to use."""
    warmup, intervals = (1, 2) if quick else (3, 4)
    env = common.child_env(workdir)
    children: list[common.Child] = []
    bus = AmqpBus(amqp_url, name=f"bench-monitor-sharding-{os.getpid()}")
    figures: dict[str, Any] = {
        "hosts": hosts,
        "gpus": hosts * GPUS_PER_HOST,
        "interval_s": interval_s,
    }
    try:
        t0 = time.monotonic()
        options = ["--hosts", str(hosts), "--gpus-per-host", str(GPUS_PER_HOST), "--port", "0"]
        sim = common.start_sim(workdir, env, *options)
        children.append(sim)
        await sim.wait_for_line(common.SIM_READY, timeout_s=60 + hosts * 0.1)
        figures["sim_start_s"] = time.monotonic() - t0
        known_hosts, host_entries = common.sim_hosts(workdir)
        config = common.write_config(
            workdir,
            known_hosts=known_hosts,
            hosts=host_entries,
            bus={"amqp_url": amqp_url},
            storage={"database_url": _asyncpg_url(pg_url)},
            monitor={"interval_s": interval_s},
            log={"level": "info"},
        )
        await _run(common.warden_argv("db", "upgrade", "monitor", "--config", str(config)), env)

        await bus.start()
        beats, samples = Heartbeats(), Samples(interval_s)
        await bus.subscribe("monitor", "replica.heartbeat", "bench.beats", beats.heard,
                            transient=True)  # fmt: skip

        def start(label: str) -> common.Child:
            argv = common.warden_argv("run", "monitor", "--config", str(config))
            child = common.Child(f"monitor {label}", argv, workdir / f"monitor-{label}.log", env)
            children.append(child)
            return child

        def split(*pair: common.Child) -> dict[int, dict[str, Any]] | None:
            found = beats.active({c.pid for c in pair})
            total = sum(d["details"].get("hosts", 0) for d in found.values())
            return found if len(found) == len(pair) and total == hosts else None

        def standby_open(*pair: common.Child) -> bool:
            found = beats.active({c.pid for c in pair}).values()
            standby = [d["details"].get("standby", {}) for d in found]
            return len(standby) == len(pair) and all(
                s.get("connected") == s.get("hosts") for s in standby
            )

        t0 = time.monotonic()
        a, b = start("a"), start("b")
        shares = await _until(lambda: split(a, b), "two active replicas", 120, sim, a, b)
        figures["replicas_start_s"] = time.monotonic() - t0
        figures["hosts_per_replica"] = sorted(d["details"]["hosts"] for d in shares.values())

        await asyncio.sleep(warmup * interval_s)
        # Steady state: each replica's standby connections open (`[monitor] standby_connections`).
        await _until(lambda: standby_open(a, b), "the standby connections", 180, sim, a, b)
        figures["standby_open_s"] = time.monotonic() - t0
        rpcs = {pid: data["details"]["rpc"] for pid, data in shares.items()}
        for rpc in rpcs.values():
            await bus.call(rpc, "stats", {"reset": True}, timeout=30)
        started = time.monotonic()
        cpu0 = {c.name: common.cpu_seconds(c.pid) for c in (sim, a, b)}
        servers0 = _server_cpu_seconds()
        await asyncio.sleep(intervals * interval_s)
        stats = [await bus.call(rpc, "stats", {}, timeout=30) for rpc in rpcs.values()]
        seconds = time.monotonic() - started
        cpu = {
            c.name: (common.cpu_seconds(c.pid) - cpu0[c.name]) / seconds * 100 for c in (sim, a, b)
        }
        servers = {k: (v - servers0[k]) / seconds * 100 for k, v in _server_cpu_seconds().items()}
        p99s = [s["sample_age_ms"]["p99"] for s in stats]
        figures.update(
            p99_sample_age_ms=max((p for p in p99s if p is not None), default=float("nan")),
            p50_sample_age_ms=max(s["sample_age_ms"]["p50"] or 0 for s in stats),
            max_sample_age_ms=max(s["sample_age_ms"]["max"] or 0 for s in stats),
            polls=sum(s["polls"] for s in stats),
            expected_polls=round(hosts * seconds / interval_s),
            missed_ticks=sum(s["missed_ticks"] for s in stats),
            failures=sum(s["failures"] for s in stats),
            monitor_cpu_percent=[round(cpu[a.name]), round(cpu[b.name])],
            monitor_rss_mib=[round(common.rss_mib(a.pid)), round(common.rss_mib(b.pid))],
            sim_cpu_percent=round(cpu[sim.name]),
            rabbitmq_cpu_percent=round(servers["rabbitmq"]),
            postgresql_cpu_percent=round(servers["postgresql"]),
            load_1m=round(os.getloadavg()[0], 1),
        )

        # Failover: SIGKILL b; its hosts fresh again from a.
        await bus.subscribe("monitor", "host.sampled", "bench.samples", samples.heard,
                            transient=True)  # fmt: skip
        await asyncio.sleep(1.0)
        ids = [data["replica"] for data in shares.values()]
        lost = {
            h["name"] for h in host_entries if owner(h["name"], ids) == shares[b.pid]["replica"]
        }
        killed_at = time.time()
        os.kill(b.pid, signal.SIGKILL)
        children.remove(b)
        b.process.wait()
        print(f"    before the kill: {_progress(figures)}", file=sys.stderr, flush=True)
        try:
            fresh_at = await _until(
                lambda: samples.fresh_after(lost, killed_at),
                "the killed replica's hosts",
                120,
                sim,
                a,
            )
        except RuntimeError:
            stale = sorted(lost - set(samples.first_after(lost, killed_at)))
            print(f"    {len(stale)} of {len(lost)} still stale: {stale[:10]}", file=sys.stderr)
            raise
        figures["monitor_failover_s"] = fresh_at - killed_at
        figures["failover_hosts"] = len(lost)
        figures.update(_failover_parts(a.output(), samples.first_after(lost, killed_at), killed_at))

        # Rejoin: b again; the hosts split again, then slots checked for a few intervals.
        rejoined_at = time.time()
        t0 = time.monotonic()
        b2 = start("b2")
        await _until(lambda: split(a, b2), "the hosts split again", 120, sim, a, b2)
        figures["rejoin_split_s"] = time.monotonic() - t0
        await asyncio.sleep(2 * interval_s)
        doubles, gaps = samples.slot_faults(rejoined_at, time.time() - interval_s)
        figures.update(rejoin_double_polls=doubles, rejoin_gaps=gaps)
        return figures
    finally:
        with contextlib.suppress(Exception):
            await bus.close()
        for child in reversed(children):
            child.stop()


def _failover_parts(survivor_log: str, first: dict[str, float], killed_at: float) -> dict:
    """Where a failover's time went: the kill to the survivor taking the hosts over (its log's
    "gone silent" rebalance), and to half and 90 % of the hosts fresh again."""
    taken = [
        at
        for line in survivor_log.splitlines()
        if "of a replica gone silent" in line
        and (at := _log_time(line)) is not None
        and at >= killed_at
    ]
    after = [at - killed_at for at in first.values()]
    found: dict[str, Any] = {}
    if taken:
        found["failover_taken_over_s"] = min(taken) - killed_at
    if after:
        found["failover_half_fresh_s"] = common.percentile(after, 50)
        found["failover_p90_fresh_s"] = common.percentile(after, 90)
    return found


def _log_time(line: str) -> float | None:
    """The Unix time a text log line begins with (`2026-11-28T03:26:52.410721Z ...`)."""
    try:
        stamp = datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%fZ")
    except ValueError:
        return None
    return stamp.replace(tzinfo=UTC).timestamp()


def _progress(figures: dict[str, Any]) -> str:
    keys = ("p99_sample_age_ms", "p50_sample_age_ms", "missed_ticks", "failures",
            "monitor_cpu_percent", "load_1m")  # fmt: skip
    return " ".join(f"{k}={figures[k]}" for k in keys if k in figures)


# --- run alone --------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def postgres_database(admin_url: str) -> AsyncIterator[str]:
    """A fresh database on the server of `admin_url` (postgresql://...); its plain URL."""
    import asyncpg

    name = f"warden_bench_{uuid.uuid4().hex[:10]}"
    admin = await asyncpg.connect(admin_url)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
        try:
            yield urlunsplit(urlsplit(admin_url)._replace(path=f"/{name}"))
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await admin.close()


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return "n/a" if math.isnan(value) else f"{value:,.1f}"
    return str(value)


def report(figures: dict[str, Any]) -> None:
    print()
    common.print_machine(
        f"RabbitMQ {common.rabbitmq_version()}",
        sharing="both monitor replicas, the simulator, RabbitMQ and PostgreSQL share it",
    )
    print(
        "setup:   `warden sim` + two `warden run monitor` processes (RabbitMQ, PostgreSQL), "
        "default [replicas] heartbeat 2 s, dead after 6 s"
    )
    print()
    common.print_table(["figure", "value"], [[k, _fmt(v)] for k, v in figures.items()], "<>")
    print()
    p99, failover = figures["p99_sample_age_ms"], figures["monitor_failover_s"]
    print(
        f"targets: p99 sample age < {TARGET_P99_MS:,.0f} ms "
        f"{common.verdict(p99 < TARGET_P99_MS, p99)}; failover < {TARGET_FAILOVER_S:g} s "
        f"{common.verdict(failover < TARGET_FAILOVER_S, failover)}; "
        f"{figures['hosts']:,} hosts (aim {TARGET_HOSTS:,})"
    )


async def run_alone(hosts: int, interval_s: float, quick: bool, amqp: str, pg: str) -> dict:
    workdir = Path(tempfile.mkdtemp(prefix="warden-monitor-sharding-"))
    try:
        with common.rabbitmq_vhost(amqp, "warden-bench-sharding") as url:
            async with postgres_database(pg) as database:
                return await measure_monitor_sharding(
                    workdir, hosts=hosts, interval_s=interval_s, amqp_url=url,
                    pg_url=database, quick=quick,
                )  # fmt: skip
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    ap = common.argument_parser(__doc__, "100 hosts at a 2 s interval, 1 + 2 intervals")
    ap.add_argument("--hosts", type=int, help=f"simulated hosts ({TARGET_HOSTS}; --quick: 100)")
    ap.add_argument("--interval", type=float, help="monitor interval_s (5; --quick: 2)")
    ap.add_argument("--amqp-url", default=common.DEFAULT_AMQP_URL)
    ap.add_argument("--pg-url", default=os.environ.get("WARDEN_BENCH_PG_URL", DEFAULT_PG_URL))
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    hosts = args.hosts or (100 if args.quick else TARGET_HOSTS)
    interval = args.interval or (2.0 if args.quick else 5.0)
    print(f"{hosts:,} hosts x {GPUS_PER_HOST} GPUs over 2 monitor replicas, every {interval:g}s")
    figures = common.run_async(
        run_alone(hosts, interval, args.quick, args.amqp_url, args.pg_url),
        "processes stopped, vhost, database and temporary files removed",
    )
    report(figures)
    common.print_result(
        hosts=figures["hosts"],
        p99_sample_age_ms=f"{figures['p99_sample_age_ms']:.0f}",
        monitor_failover_s=f"{figures['monitor_failover_s']:.1f}",
        rejoin_double_polls=figures["rejoin_double_polls"],
        rejoin_gaps=figures["rejoin_gaps"],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
