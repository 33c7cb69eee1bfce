"""Prometheus metrics of every service (the official prometheus-client), one registry a process.

Every metric is named `warden_*` and labelled `service` and `replica` (the replica id that
health and the heartbeats show), so one process running all five services (`warden run all`)
and five processes scaled to many replicas read the same way in Prometheus.

Two kinds:
- observed on the way (counters and histograms: events, RPC, HTTP, polls). The code that
  observes keeps the child of each label set it uses (`Children`), so the hot path costs one
  dict lookup and one `inc`/`observe`.
- read when Prometheus scrapes (gauges: leadership, hosts polled, queue depths, outbox
  backlog): each service adds `Probe`s; `render()` runs them all at once within a deadline,
  and a probe that fails or is late leaves its gauges out (not available is not zero).

Where it is served: http.py.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

log = logging.getLogger("warden.metrics")

REGISTRY = CollectorRegistry()
ProcessCollector(registry=REGISTRY)  # process_cpu_seconds_total, resident memory, open fds

LABELS = ("service", "replica")
# Latencies of calls and requests: 1 ms to 10 s.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)
# A poll's duration and a sample's age (from its tick to its events): 10 ms to 30 s.
POLL_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)

EVENTS_PUBLISHED = Counter(
    "warden_events_published",
    "Events this replica published, by type.",
    [*LABELS, "type"],
    registry=REGISTRY,
)
EVENTS_CONSUMED = Counter(
    "warden_events_consumed",
    "Events this replica's handlers took, by type; outcome ok, or failed (retried, then "
    "dead-lettered).",
    [*LABELS, "type", "outcome"],
    registry=REGISTRY,
)
RPC_CLIENT = Histogram(
    "warden_rpc_client_duration_seconds",
    "RPC calls this replica made, as the caller waited: by target service, method and outcome "
    "(ok, error: the service refused, unavailable: no answer in time).",
    [*LABELS, "target", "method", "outcome"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
RPC_SERVER = Histogram(
    "warden_rpc_server_duration_seconds",
    "RPC calls this replica answered, by method and outcome (ok, error).",
    [*LABELS, "method", "outcome"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
HTTP_REQUESTS = Histogram(
    "warden_http_request_duration_seconds",
    "HTTP requests the gateway answered, by route template, method and status class (2xx).",
    [*LABELS, "route", "method", "status"],
    buckets=LATENCY_BUCKETS,
    registry=REGISTRY,
)
POLL_DURATION = Histogram(
    "warden_poll_duration_seconds",
    "How long one poll of one host took (the monitor), failed ones included.",
    LABELS,
    buckets=POLL_BUCKETS,
    registry=REGISTRY,
)
SAMPLE_AGE = Histogram(
    "warden_sample_age_seconds",
    "How old a host's sample was when its events went out: from the poll's tick (the monitor).",
    LABELS,
    buckets=POLL_BUCKETS,
    registry=REGISTRY,
)
POLL_FAILURES = Counter(
    "warden_poll_failures",
    "Polls of a host that failed (unreachable, timed out).",
    LABELS,
    registry=REGISTRY,
)

# The gauges read at scrape time: name -> (help, the labels a sample adds to service, replica).
GAUGES: dict[str, tuple[str, tuple[str, ...]]] = {
    "warden_replica_leader": (
        "1 when this replica is its service's leader, else 0 (standby, or a service without "
        "a leader).",
        (),
    ),
    "warden_replica_info": ("1, with this replica's role and version.", ("role", "version")),
    "warden_hosts_polled": ("Hosts this monitor replica polls.", ()),
    "warden_gpu_health": (
        "Health of each GPU this monitor replica polls: 0 ok, 1 degraded, 2 failed.",
        ("host", "uuid", "index"),
    ),
    "warden_queue_messages": (
        "Messages ready in a queue this service consumes (its dead-letter and RPC queues too).",
        ("queue",),
    ),
    "warden_queue_consumers": ("Consumers of a queue this service consumes.", ("queue",)),
    "warden_outbox_backlog": ("Events written with their change but not yet published.", ()),
    "warden_outbox_oldest_seconds": ("Age of the oldest event waiting in the outbox.", ()),
    "warden_replicas_live": (
        "Live replicas of each service as this replica hears their heartbeats (the gateway).",
        ("of",),
    ),
}

Sample = tuple[str, Mapping[str, str], float]
"""(a gauge of GAUGES, its extra labels, its value)."""
Probe = Callable[[], Awaitable[Iterable[Sample]]]
# How long one scrape waits for the probes; a late one is left out of that scrape.
PROBE_DEADLINE_S = 2.0


class Children:
    """The children of one metric for a fixed service and replica, made once per label set:
    `labels()` costs microseconds, a dict lookup does not."""

    def __init__(self, metric: Any, service: str, replica: str) -> None:
        self.metric = metric
        self.base = (service, replica)
        self._made: dict[tuple[str, ...], Any] = {}

    def __call__(self, *values: str) -> Any:
        child = self._made.get(values)
        if child is None:
            child = self._made[values] = self.metric.labels(*self.base, *values)
        return child


class Probes(Collector):
    """The scrape-time gauges: probes of every service of this process, and their last values."""

    def __init__(self) -> None:
        self._probes: dict[int, tuple[tuple[str, str], Probe]] = {}
        self._ids = itertools.count()
        self._last: list[Metric] = []

    def add(self, service: str, replica: str, probe: Probe) -> Callable[[], None]:
        """Run `probe` at every scrape, its samples labelled with `service` and `replica`;
        returns what removes it."""
        key = next(self._ids)
        self._probes[key] = ((service, replica), probe)
        return lambda: self._probes.pop(key, None) and None

    async def refresh(self, deadline_s: float = PROBE_DEADLINE_S) -> None:
        probes = list(self._probes.values())
        results = await asyncio.gather(
            *(asyncio.wait_for(probe(), deadline_s) for _, probe in probes),
            return_exceptions=True,
        )
        families = {
            name: GaugeMetricFamily(name, help, labels=[*LABELS, *extra])
            for name, (help, extra) in GAUGES.items()
        }
        for (base, _), found in zip(probes, results, strict=True):
            if isinstance(found, BaseException):
                log.debug("a metrics probe of %s failed: %r", base[0], found)
                continue
            for name, labels, value in found:
                extra = GAUGES[name][1]
                families[name].add_metric([*base, *(labels[k] for k in extra)], value)
        self._last = [family for family in families.values() if family.samples]

    def collect(self) -> Iterable[Metric]:
        return list(self._last)


PROBES = Probes()
REGISTRY.register(PROBES)


async def render() -> tuple[bytes, str]:
    """The exposition of this process's metrics (probes run now), and its content type."""
    await PROBES.refresh()
    return generate_latest(REGISTRY), CONTENT_TYPE_LATEST
