"""Throughput and latency of Warden's message buses (AMQP on RabbitMQ, and in-process).

Usage::

    .venv/bin/python bench/bus_throughput.py [--quick] [--amqp-url URL] [--events N] [--runs N]

What it measures (same process, one event loop, as two services would each run one):

- Events: N small `host.recovered` events ({"host": "h1", "at": <ISO UTC>}) published through
  `Bus.emit` (so each one is validated by `make_envelope` and published; on AMQP persistent and
  with publisher confirms, up to `--in-flight` emits pipelined) and consumed by a subscriber
  that acks each one. On AMQP the subscriber is a second `AmqpBus` (its own connection, like a
  separate service). End-to-end events/s = N / (first publish -> last event handled).
  Publish-only events/s: the same N emits with the consumer's queue bound but nobody
  consuming (on AMQP: until every confirm is back). The events queued by that phase are then
  drained, which gives a consume-only rate as a side figure.
- RPC: `bench.echo` served on one bus and called from another (on AMQP: two connections);
  warm-up calls, then sequential calls: p50 / p99 / max in ms.
- Reliability: the AMQP end-to-end run with the consumer in its own process is repeated
  `--runs` times in a row (5; --quick: 2), each on the same queue, after the others: each
  run's events/s and CPU per event (publisher, consumer, RabbitMQ) are printed, with the
  minimum and the median. The target is met only if the minimum reaches it.

Isolation: without --amqp-url it creates its own RabbitMQ vhost with rabbitmqctl (and deletes
it at the end, also on error or Ctrl-C). With --amqp-url it uses that vhost and deletes the
queues it declared (their names carry a random suffix).

The last line is machine-readable:
`RESULT amqp_events_per_s=<int> amqp_events_per_s_min=<int> inproc_events_per_s=<int>
rpc_p99_ms=<float>` (amqp_events_per_s: the median of the runs).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import os
import statistics
import sys
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import _common as common

from services.shared import event_loop
from services.shared.bus.amqp import AmqpBus
from services.shared.bus.base import Bus, BusSettings, dead_letter_queue_name, queue_name
from services.shared.bus.inproc import InProcessBus
from services.shared.contracts import Envelope, make_envelope, parse_envelope

EVENT_TYPE = "host.recovered"
SOURCE = "monitor"
PATTERN = "host.recovered"

TARGET_AMQP_EPS = 4_000
TARGET_INPROC_EPS = 50_000
TARGET_RPC_P99_MS = 10.0


# --- measurements ------------------------------------------------------------------------------


@dataclass
class EventFigures:
    bus: str
    events: int
    seconds: float  # end to end
    publish_only_s: float
    publish_during_e2e_s: float = 0.0
    drain_s: float = 0.0  # consume-only (the queue filled by the publish-only phase)
    # AMQP: end to end with the consumer in its own process, as services are deployed, once
    # per run, each with its CPU per event.
    runs: list[tuple[float, CpuPerEvent]] = field(default_factory=list)

    @property
    def two_process_eps(self) -> float | None:
        return statistics.median(eps for eps, _ in self.runs) if self.runs else None

    @property
    def min_eps(self) -> float:
        return min(eps for eps, _ in self.runs) if self.runs else self.eps

    @property
    def one_process_eps(self) -> float:
        return self.events / self.seconds if self.seconds else 0.0

    @property
    def eps(self) -> float:
        """The headline end-to-end figure."""
        return self.two_process_eps or self.one_process_eps

    @property
    def publish_eps(self) -> float:
        return self.events / self.publish_only_s if self.publish_only_s else 0.0

    @property
    def drain_eps(self) -> float:
        return self.events / self.drain_s if self.drain_s else 0.0


def event_data() -> dict[str, Any]:
    return {"host": "h1", "at": datetime.now(UTC).isoformat()}


class Counter:
    """A subscriber's handler: counts the events of this run, notes when the last one came."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.seen = 0
        self.last_at = 0.0
        self.done = asyncio.Event()

    def reset(self, expected: int) -> None:
        self.expected, self.seen, self.last_at = expected, 0, 0.0
        self.done = asyncio.Event()

    async def __call__(self, envelope: Envelope) -> None:
        if envelope.type != EVENT_TYPE:
            return
        self.seen += 1
        if self.seen >= self.expected:
            self.last_at = time.perf_counter()
            self.done.set()


async def emit_many(bus: Bus, n: int, in_flight: int) -> float:
    """Emit n events with at most `in_flight` outstanding; returns when all are published."""
    remaining = n

    async def worker() -> None:
        nonlocal remaining
        while remaining > 0:
            remaining -= 1
            await bus.emit(EVENT_TYPE, event_data(), source=SOURCE)

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(max(1, min(in_flight, n)))))
    return time.perf_counter() - start


async def wait_done(counter: Counter, n: int, what: str) -> None:
    # Generous: never hang the benchmark, even on a slow broker (>= 200 events/s).
    timeout = max(30.0, n / 200)
    try:
        await asyncio.wait_for(counter.done.wait(), timeout)
    except TimeoutError:
        raise RuntimeError(
            f"{what}: only {counter.seen} of {n} events handled within {timeout:.0f}s"
        ) from None


async def measure_events(
    name: str,
    publisher: Bus,
    consumer: Bus,
    n: int,
    *,
    in_flight: int,
    concurrency: int,
    consumer_name: str,
) -> EventFigures:
    counter = Counter(n)

    # 1. Publish only: the consumer's queue exists and is bound, nobody consumes it.
    teardown = await consumer.subscribe(
        SOURCE, PATTERN, consumer_name, counter, concurrency=concurrency
    )
    await teardown()
    await asyncio.sleep(0.05)
    publish_only_s = await emit_many(publisher, n, in_flight)

    # 2. Drain what phase 1 queued (consume only).
    counter.reset(n)
    start = time.perf_counter()
    teardown = await consumer.subscribe(
        SOURCE, PATTERN, consumer_name, counter, concurrency=concurrency
    )
    await wait_done(counter, n, f"{name} drain")
    drain_s = counter.last_at - start

    # 3. End to end: publish while the subscriber consumes and acks.
    await asyncio.sleep(0.2)  # let stragglers settle; the queue is empty now
    counter.reset(n)
    start = time.perf_counter()
    publish_s = await emit_many(publisher, n, in_flight)
    await wait_done(counter, n, f"{name} end-to-end")
    seconds = counter.last_at - start
    await teardown()
    return EventFigures(name, n, seconds, publish_only_s, publish_s, drain_s)


async def consumer_process(url: str, consumer_name: str, n: int, concurrency: int) -> None:
    """The child of the AMQP end-to-end run: a separate process that consumes, as a service."""
    bus = AmqpBus(url, name=f"bench-consumer-process-{os.getpid()}")
    await bus.start()
    counter = Counter(n)
    teardown = await bus.subscribe(SOURCE, PATTERN, consumer_name, counter, concurrency=concurrency)
    print("ready", flush=True)
    cpu_start = time.process_time()
    await wait_done(counter, n, "consumer process")
    cpu_us = (time.process_time() - cpu_start) / n * 1e6
    done_at = time.time() - (time.perf_counter() - counter.last_at)
    print(f"done {done_at:.6f} {cpu_us:.1f}", flush=True)
    await teardown()
    await bus.close()


@dataclass
class CpuPerEvent:
    publisher_us: float
    consumer_us: float
    broker_us: float | None  # None when the broker is not a local process we can read


def broker_cpu_s() -> float | None:
    """CPU seconds used so far by the local RabbitMQ (beam.smp), from /proc; None if not found.
    Tests start private brokers beside it: the one started first is the machine's."""
    found: list[tuple[int, str]] = []
    for comm in Path("/proc").glob("[0-9]*/comm"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if comm.read_text().strip() == "beam.smp":
                stat = (comm.parent / "stat").read_text()
                started = int(stat.rsplit(")", 1)[1].split()[19])  # field 22: starttime
                found.append((started, comm.parent.name))
    return common.cpu_seconds(min(found)[1]) if found else None


async def measure_e2e_two_processes(
    url: str, publisher: Bus, cfg: Config, consumer_name: str
) -> tuple[float, CpuPerEvent]:
    """End-to-end events/s with the consumer in its own process (two services, one broker)."""
    child = await asyncio.create_subprocess_exec(
        sys.executable,
        __file__,
        "--consumer-process",
        url,
        consumer_name,
        str(cfg.events),
        str(cfg.concurrency),
        stdout=asyncio.subprocess.PIPE,
    )
    assert child.stdout is not None
    try:
        line = await asyncio.wait_for(child.stdout.readline(), 30)
        if line.strip() != b"ready":
            raise RuntimeError(f"consumer process did not start: {line!r}")
        broker_start = broker_cpu_s()
        cpu_start = time.process_time()
        start = time.time()
        await emit_many(publisher, cfg.events, cfg.in_flight)
        publisher_us = (time.process_time() - cpu_start) / cfg.events * 1e6
        line = await asyncio.wait_for(child.stdout.readline(), max(60.0, cfg.events / 200))
        if not line.startswith(b"done "):
            raise RuntimeError(f"consumer process failed: {line!r}")
        _, done_at, consumer_us = line.split()
        broker_end = broker_cpu_s()
        broker_us = (
            (broker_end - broker_start) / cfg.events * 1e6
            if broker_start is not None and broker_end is not None
            else None
        )
        cpu = CpuPerEvent(publisher_us, float(consumer_us), broker_us)
        return cfg.events / (float(done_at) - start), cpu
    finally:
        if child.returncode is None:
            child.kill()
        await child.wait()


async def measure_rpc(server: Bus, client: Bus, warmup: int, calls: int) -> common.Latencies:
    async def echo(args: dict[str, Any]) -> dict[str, Any]:
        return args

    teardown = await server.serve("bench", {"echo": echo})
    try:
        for i in range(warmup):
            await client.call("bench", "echo", {"i": i}, timeout=5)
        figures = common.Latencies()
        for i in range(calls):
            t0 = time.perf_counter_ns()
            reply = await client.call("bench", "echo", {"i": i}, timeout=5)
            figures.samples_ms.append((time.perf_counter_ns() - t0) / 1e6)
            if reply != {"i": i}:
                raise RuntimeError(f"bench.echo answered {reply!r} to {{'i': {i}}}")
        return figures
    finally:
        await teardown()


def micro_costs(n: int) -> tuple[float, float]:
    """µs per make_envelope and per parse_envelope of the bench event (pure CPU)."""
    data = event_data()
    t0 = time.perf_counter()
    for _ in range(n):
        env = make_envelope(EVENT_TYPE, data, source=SOURCE)
    make_us = (time.perf_counter() - t0) / n * 1e6
    body = env.to_json()
    t0 = time.perf_counter()
    for _ in range(n):
        parse_envelope(body)
    parse_us = (time.perf_counter() - t0) / n * 1e6
    return make_us, parse_us


# --- the run ------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = common.argument_parser(__doc__, "1,000 events, 200 RPCs")
    ap.add_argument(
        "--amqp-url",
        help="use this broker/vhost as is (default: a fresh vhost on "
        f"{common.DEFAULT_AMQP_URL} made with rabbitmqctl)",
    )
    ap.add_argument("--events", type=int, help="events per measurement (default 20,000)")
    ap.add_argument("--in-flight", type=int, default=200, help="AMQP emits in flight (200)")
    ap.add_argument(
        "--concurrency", type=int, default=1, help="subscribe(concurrency=...) of the consumer (1)"
    )
    ap.add_argument(
        "--no-uvloop",
        action="store_true",
        help="asyncio's own event loop, not uvloop (as `warden run` with WARDEN_UVLOOP=0)",
    )
    ap.add_argument(
        "--runs", type=int, help="AMQP end-to-end runs in a row (default 5; --quick: 2)"
    )
    return ap.parse_args(argv)


@dataclass
class Config:
    events: int
    rpc_warmup: int
    rpc_calls: int
    in_flight: int
    concurrency: int
    inproc_runs: int
    runs: int


async def run_inproc(cfg: Config) -> tuple[EventFigures, common.Latencies, list[float]]:
    """In-process runs take well under a second, so one scheduling hiccup of another process
    skews them: the best of `cfg.inproc_runs` runs (each on a fresh bus) is reported."""
    runs: list[EventFigures] = []
    for _ in range(max(1, cfg.inproc_runs)):
        bus = InProcessBus(BusSettings())
        await bus.start()
        try:
            # One bus is the whole "broker" in-process: publisher and subscriber share it.
            runs.append(
                await measure_events(
                    "in-process",
                    bus,
                    bus,
                    cfg.events,
                    in_flight=1,  # publish never waits in-process: sequential emits
                    concurrency=cfg.concurrency,
                    consumer_name="bench.on_recovered",
                )
            )
        finally:
            await bus.close()
    best = max(runs, key=lambda ev: ev.eps)
    best.publish_only_s = min(ev.publish_only_s for ev in runs)
    bus = InProcessBus(BusSettings())
    await bus.start()
    try:
        rpc = await measure_rpc(bus, bus, cfg.rpc_warmup, cfg.rpc_calls)
    finally:
        await bus.close()
    return best, rpc, [ev.eps for ev in runs]


async def run_amqp(
    url: str, cfg: Config, shared_vhost: bool
) -> tuple[EventFigures, common.Latencies]:
    suffix = uuid.uuid4().hex[:8]
    consumer_name = f"bench.on_recovered_{suffix}"
    publisher = AmqpBus(url, name=f"bench-publisher-{suffix}")
    consumer = AmqpBus(url, name=f"bench-consumer-{suffix}")
    await publisher.start()
    try:
        await consumer.start()
        try:
            events = await measure_events(
                "amqp",
                publisher,
                consumer,
                cfg.events,
                in_flight=cfg.in_flight,
                concurrency=cfg.concurrency,
                consumer_name=consumer_name,
            )
            for _ in range(cfg.runs):
                events.runs.append(
                    await measure_e2e_two_processes(url, publisher, cfg, consumer_name)
                )
            # Serve on the consumer's connection, call from the publisher's.
            rpc = await measure_rpc(consumer, publisher, cfg.rpc_warmup, cfg.rpc_calls)
            if shared_vhost:
                await _delete_queues(consumer, queue_name(SOURCE, PATTERN, consumer_name))
        finally:
            await consumer.close()
    finally:
        await publisher.close()
    return events, rpc


async def _delete_queues(bus: AmqpBus, name: str) -> None:
    connection = bus._require_connection()
    channel = await connection.channel()
    try:
        for queue in (name, dead_letter_queue_name(name)):
            await channel.queue_delete(queue)
    finally:
        await channel.close()


def fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def report(
    amqp: tuple[EventFigures, common.Latencies],
    inproc: tuple[EventFigures, common.Latencies],
    cfg: Config,
    micro: tuple[float, float],
    rmq_version: str,
    where: str,
    inproc_runs: list[float],
) -> None:
    print()
    common.print_machine(
        f"RabbitMQ {rmq_version}", sharing="other work on the machine skews figures"
    )
    print(f"broker:  {where}; event loop: {event_loop.loop_name()} (as `warden run`)")
    print(
        f"events:  {cfg.events:,} x '{EVENT_TYPE}' via Bus.emit (make_envelope validation + "
        f"publish; AMQP: persistent + confirms, {cfg.in_flight} in flight), consumed with acks "
        f"by subscribe(concurrency={cfg.concurrency}) on a second connection "
        "(AMQP e2e: in a second process)"
    )
    print(
        f"in-proc: best of {len(inproc_runs)} runs (end-to-end ev/s of each: "
        + ", ".join(fmt_int(x) for x in inproc_runs)
        + f"); AMQP e2e: median of {cfg.runs} runs in a row"
    )
    print(f"rpc:     bench.echo, {cfg.rpc_warmup} warm-up + {cfg.rpc_calls} sequential calls")
    print()
    common.print_table(
        [
            "bus",
            "events",
            "e2e ev/s",
            "e2e ev/s 1 proc",
            "publish-only ev/s",
            "rpc p50 ms",
            "rpc p99 ms",
            "rpc max ms",
        ],
        [
            [
                ev.bus,
                f"{ev.events:,}",
                fmt_int(ev.eps),
                fmt_int(ev.one_process_eps),
                fmt_int(ev.publish_eps),
                *(f"{ms:.3f}" for ms in (rpc.p50, rpc.p99, rpc.max)),
            ]
            for ev, rpc in (amqp, inproc)
        ],
        "<>>>>>>>",
    )
    print(
        "(AMQP e2e: publisher and consumer in two processes, as two services; "
        "'1 proc': both in one process and event loop)"
    )
    print()
    a_ev, a_rpc = amqp
    i_ev, _ = inproc
    if a_ev.runs:
        print(f"AMQP end to end, {len(a_ev.runs)} runs in a row (consumer in its own process):")
        common.print_table(
            ["run", "events/s", "publisher us/ev", "consumer us/ev", "RabbitMQ us/ev"],
            [
                [
                    str(i),
                    fmt_int(eps),
                    f"{cpu.publisher_us:.0f}",
                    f"{cpu.consumer_us:.0f}",
                    "n/a" if cpu.broker_us is None else f"{cpu.broker_us:.0f}",
                ]
                for i, (eps, cpu) in enumerate(a_ev.runs, start=1)
            ],
            "<>>>>",
        )
        figures = ", ".join(fmt_int(eps) for eps, _ in a_ev.runs)
        print(f"  events/s: {figures}; minimum {fmt_int(a_ev.min_eps)}")
        print()
    print("targets:")
    print(
        f"  AMQP end-to-end min  {fmt_int(a_ev.min_eps):>9} events/s   target >= "
        f"{TARGET_AMQP_EPS:,}    {common.verdict(a_ev.min_eps >= TARGET_AMQP_EPS)}"
    )
    print(
        f"  in-process e2e       {fmt_int(i_ev.eps):>9} events/s   target >= "
        f"{TARGET_INPROC_EPS:,}   {common.verdict(i_ev.eps >= TARGET_INPROC_EPS)}"
    )
    print(
        f"  RabbitMQ RPC p99     {a_rpc.p99:>9.2f} ms         target <  "
        f"{TARGET_RPC_P99_MS:g}       {common.verdict(a_rpc.p99 < TARGET_RPC_P99_MS)}"
    )
    print()
    print("side figures:")
    for ev in (a_ev, i_ev):
        print(
            f"  {ev.bus:<10} consume-only (drain of a full queue) {fmt_int(ev.drain_eps):>9} ev/s; "
            f"publishing during e2e took {ev.publish_during_e2e_s:.3f}s"
        )
    if a_ev.runs:
        cpus = [cpu for _, cpu in a_ev.runs]
        publisher = statistics.median(c.publisher_us for c in cpus)
        consumer = statistics.median(c.consumer_us for c in cpus)
        brokers = [c.broker_us for c in cpus if c.broker_us is not None]
        broker_us = statistics.median(brokers) if brokers else None
        broker = f"{broker_us:.0f}" if broker_us is not None else "n/a"
        total = publisher + consumer + (broker_us or 0.0)
        cores = common.usable_cpus()
        print(
            f"  AMQP e2e CPU per event (median of the runs): publisher {publisher:.0f} us + "
            f"consumer {consumer:.0f} us + RabbitMQ {broker} us = {total:.0f} us, so "
            f"{cores} cores cap it near {fmt_int(cores * 1e6 / total)} events/s"
        )
    make_us, parse_us = micro
    print(
        f"  per event CPU: make_envelope {make_us:.1f} us "
        f"(caps emit at {fmt_int(1e6 / make_us)}/s), "
        f"parse_envelope {parse_us:.1f} us (caps a consumer at {fmt_int(1e6 / parse_us)}/s)"
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--consumer-process"]:
        url, consumer_name, n, concurrency = argv[1:5]
        logging.basicConfig(level=logging.WARNING)
        event_loop.run(consumer_process(url, consumer_name, int(n), int(concurrency)))
        return 0
    args = parse_args(argv)
    common.setup_logging_and_sigterm()

    events = args.events or (1_000 if args.quick else 20_000)
    cfg = Config(
        events=events,
        rpc_warmup=20 if args.quick else 200,
        rpc_calls=200 if args.quick else 2_000,
        in_flight=args.in_flight,
        concurrency=args.concurrency,
        inproc_runs=1 if args.quick else 3,
        runs=args.runs or (2 if args.quick else 5),
    )
    rmq_version = common.rabbitmq_version()
    micro = micro_costs(500 if args.quick else 5_000)

    if args.no_uvloop:
        os.environ["WARDEN_UVLOOP"] = "0"  # the consumer process inherits it
    inproc_events, inproc_rpc, inproc_runs = event_loop.run(run_inproc(cfg))
    inproc = (inproc_events, inproc_rpc)

    with contextlib.ExitStack() as own_vhost:
        url = args.amqp_url or own_vhost.enter_context(
            common.rabbitmq_vhost(common.DEFAULT_AMQP_URL, "warden-bench")
        )
        amqp = event_loop.run(run_amqp(url, cfg, shared_vhost=bool(args.amqp_url)))

    parts = urlsplit(url)
    where = f"{parts.hostname}:{parts.port or 5672} vhost {unquote(parts.path[1:]) or '/'}" + (
        " (given)" if args.amqp_url else " (own vhost, deleted)"
    )
    report(amqp, inproc, cfg, micro, rmq_version, where, inproc_runs)
    common.print_result(
        amqp_events_per_s=int(amqp[0].eps),
        amqp_events_per_s_min=int(amqp[0].min_eps),
        inproc_events_per_s=int(inproc[0].eps),
        rpc_p99_ms=f"{amqp[1].p99:.2f}",
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
