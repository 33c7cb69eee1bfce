"""The monitor's Prometheus metrics (not the GPU metrics it stores: tsdb/): each poll's
duration and sample age, and the hosts this replica polls."""

from __future__ import annotations

from services.monitor.monitor import Monitor
from services.shared.bus import Teardown
from services.shared.metrics import POLL_DURATION, POLL_FAILURES, SAMPLE_AGE, Sample
from services.shared.runtime import ServiceContext

HEALTH_VALUES = {"ok": 0.0, "degraded": 1.0, "failed": 2.0}


def observe(monitor: Monitor, ctx: ServiceContext) -> Teardown:
    """Count `monitor`'s polls under this replica's labels; returns what stops counting."""
    labels = (ctx.name, ctx.replicas.replica_id)
    duration, age = POLL_DURATION.labels(*labels), SAMPLE_AGE.labels(*labels)
    failures = POLL_FAILURES.labels(*labels)

    def on_poll(seconds: float, age_s: float | None) -> None:
        duration.observe(seconds)
        if age_s is None:
            failures.inc()
        else:
            age.observe(age_s)

    async def hosts() -> list[Sample]:
        # What this replica's heartbeat says it polls (its share of the hosts) when it says
        # so, else every host it has a poll loop for.
        told = ctx.replicas.details().get("hosts")
        count = told if isinstance(told, int) and not isinstance(told, bool) else None
        return [
            ("warden_hosts_polled", {}, float(len(monitor.readers) if count is None else count))
        ]

    async def gpu_health() -> list[Sample]:
        return [
            (
                "warden_gpu_health",
                {"host": host, "uuid": uuid, "index": str(entry["index"])},
                HEALTH_VALUES[entry["state"]],
            )
            for host, health in list(monitor.health.items())
            for uuid, entry in health.entries().items()
        ]

    monitor.stats.on_poll = on_poll
    removals = [ctx.metered.add_probe(hosts), ctx.metered.add_probe(gpu_health)]

    async def remove() -> None:
        for removal in removals:
            await removal()

    return remove
