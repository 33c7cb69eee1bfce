"""GPU and CPU time series: the `MetricsStore` interface, its fake and its implementations.

`base` (interface and data), `memory` (the fake), `sqlite` (`SqlMetricsStore`, the embedded
default on SQLite or PostgreSQL) and `influx` (`InfluxMetricsStore`, InfluxDB 2). Import the
implementation you need from its module; importing this package connects to nothing.
"""

from services.monitor.tsdb.base import (
    GPU_METRICS,
    HOST_METRICS,
    Bucket,
    GpuPoint,
    HostPoint,
    MetricsStore,
)
from services.monitor.tsdb.memory import MemoryMetricsStore

__all__ = [
    "GPU_METRICS",
    "HOST_METRICS",
    "Bucket",
    "GpuPoint",
    "HostPoint",
    "MemoryMetricsStore",
    "MetricsStore",
]
