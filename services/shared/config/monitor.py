"""`[monitor]`: polling the hosts' GPUs, pacing the SSH handshakes, where time series go."""

from __future__ import annotations

from dataclasses import dataclass

from services.shared.config.declare import option


@dataclass(frozen=True)
class MonitorSettings:
    """Polling the hosts' GPUs, and where their time series go."""

    interval_s: float = option(5.0, "Seconds between two polls of a host.", min=0.1, max=3600)
    poll_timeout_s: float = option(
        0.0,
        "Deadline of one poll in seconds; 0: 80 % of interval_s (a poll never runs into the next).",
        min=0,
        max=3600,
    )
    max_handshakes: int = option(
        32,
        "SSH handshakes one monitor replica runs at once; the others wait their turn (past a "
        "few, more only slow each one down until they time out).",
        min=1,
        max=4096,
    )
    handshakes_per_s: float = option(
        300.0,
        "First polls a monitor replica starts per second of the hosts it gains at once (at its "
        "start, or taking over a replica's hosts); each opens an SSH connection.",
        min=1,
        max=100_000,
    )
    standby_connections: bool = option(
        True,
        "With two monitor replicas or more, each keeps an SSH connection open to the hosts it "
        "would take over if the replica polling them stopped, so that a takeover needs no "
        "handshakes; false: none (each host then has one connection from Warden's monitor, "
        "not two).",
    )
    local_nvml: str = option(
        "auto",
        "Monitor this machine through NVML: auto (when it has an NVIDIA driver), on, off.",
        choices=("auto", "on", "off"),
    )
    local_name: str = option("", "Name of this machine in Warden; empty: its hostname.")
    tsdb: str = option(
        "embedded",
        "Where GPU and CPU time series go: embedded (the monitor's database) or influx "
        "(InfluxDB 2).",
        choices=("embedded", "influx"),
    )
    raw_retention_h: float = option(48.0, "Embedded store: hours raw samples are kept.", min=0.1)
    rollup_retention_d: float = option(
        90.0, "Embedded store: days 1-minute rollups are kept.", min=0.1
    )
    influx_url: str = option("", 'InfluxDB 2 URL; required when tsdb = "influx".')
    influx_org: str = option("", 'InfluxDB 2 organisation; required when tsdb = "influx".')
    influx_bucket: str = option("warden", "InfluxDB 2 bucket.")
    influx_token: str = option(
        "",
        'InfluxDB 2 token; required when tsdb = "influx". A secret: rather set it in '
        "WARDEN_MONITOR_INFLUX_TOKEN.",
        secret=True,
    )

    @property
    def poll_deadline_s(self) -> float:
        return self.poll_timeout_s or self.interval_s * 0.8
