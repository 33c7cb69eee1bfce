"""`[scheduling]`: how the earliest slot and the jobs' placement choose among fitting GPUs."""

from __future__ import annotations

from dataclasses import dataclass

from services.shared.config.declare import option


@dataclass(frozen=True)
class SchedulingSettings:
    """Which GPUs "any N GPUs" bookings and queued jobs get: the best-connected set on one host
    (NVLink first, then PCIe switch, host bridge, NUMA node), then the fewest hosts."""

    packing: str = option(
        "pack",
        "Among equally connected sets: pack (the host with the fewest free GPUs, so whole "
        "hosts stay free for large work) or spread (the emptiest host).",
        choices=("pack", "spread"),
    )
