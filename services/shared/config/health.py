"""`[health]`: which GPU health signals make a GPU degraded or failed, and when it returns
(services/monitor/gpu_health.py reads them)."""

from __future__ import annotations

from dataclasses import dataclass

from services.shared.config.declare import option

# The signals the monitor reads (services.monitor.gpu_health.Signal; config imports no service).
SIGNALS = (
    "lost",
    "ecc_uncorrectable",
    "row_remap_pending",
    "row_remap_failure",
    "retired_pages_pending",
    "xid",
    "thermal_slowdown",
    "power_brake_slowdown",
    "pcie_link_degraded",
)


@dataclass(frozen=True)
class HealthSettings:
    """GPU health: a failed GPU leaves the pool (no new bookings or queued jobs on it) until it
    has read healthy for healthy_for_s; a degraded one stays in it, marked."""

    failed: tuple[str, ...] = option(
        (
            "lost",
            "ecc_uncorrectable",
            "row_remap_failure",
            "row_remap_pending",
            "retired_pages_pending",
            "xid",
        ),
        "Signals that make a GPU failed: lost (not answering while its host does), "
        "ecc_uncorrectable (volatile count above 0), row_remap_pending, row_remap_failure, "
        "retired_pages_pending (GPUs before Ampere), xid (a critical XID; NVML probe only).",
        choices=SIGNALS,
    )
    degraded: tuple[str, ...] = option(
        ("thermal_slowdown", "power_brake_slowdown", "pcie_link_degraded"),
        "Signals that make a GPU degraded (a signal in both lists is failed; in neither: "
        "ignored): thermal_slowdown, power_brake_slowdown, pcie_link_degraded (a link "
        "narrower than the GPU's maximum).",
        choices=SIGNALS,
    )
    healthy_for_s: float = option(
        600.0,
        "A failed GPU returns to the pool after reading healthy for this many seconds in a row.",
        min=0,
        max=7 * 86400,
    )
