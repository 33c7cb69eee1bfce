"""GPU faults of the simulated fleet: what nvidia-smi prints for a GPU that is lost, has
uncorrectable ECC errors, a row remap pending, or slows its clocks for heat, in the probe's
health section (`services.monitor.gpu_health.HEALTH_SCRIPT`) and its GPU query.

`warden sim ctl gpu-fault --host H --gpu N --fault F` (control API
`POST /hosts/{host}/gpus/{index}/fault {"fault": F}`) sets one; `--fault ok` heals it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

from services.monitor.gpu_health import HEALTH_FIELDS
from services.sim.gpus import SimGpu

GPU_FAULTS = ("ok", "lost", "ecc", "row_remap_pending", "thermal", "pcie")
GpuFault = Literal["ok", "lost", "ecc", "row_remap_pending", "thermal", "pcie"]
LOST_RC = 15  # what nvidia-smi exits with when a GPU fell off the bus

# Each field of the health query as a GPU without a fault prints it (current driver names).
_HEALTHY = {
    "ecc.errors.uncorrected.volatile.total": "0",
    "retired_pages.pending": "[N/A]",
    "remapped_rows.pending": "No",
    "remapped_rows.failure": "No",
    "clocks_throttle_reasons.hw_thermal_slowdown": "Not Active",
    "clocks_throttle_reasons.sw_thermal_slowdown": "Not Active",
    "clocks_throttle_reasons.hw_power_brake_slowdown": "Not Active",
    "pcie.link.width.current": "16",
    "pcie.link.width.max": "16",
}
_FAULTY = {
    "ecc": {"ecc.errors.uncorrected.volatile.total": "2"},
    "row_remap_pending": {"remapped_rows.pending": "Yes"},
    "thermal": {"clocks_throttle_reasons.hw_thermal_slowdown": "Active"},
    "pcie": {"pcie.link.width.current": "8"},
}
_HEADER = ", ".join(
    f.replace("clocks_throttle_reasons", "clocks_event_reasons") for f in HEALTH_FIELDS
)


def bus_id(gpu: SimGpu) -> str:
    return f"00000000:{0x07 + 8 * gpu.index:02X}:00.0"


def lost_line(gpu: SimGpu) -> str:
    """nvidia-smi's line for a GPU it cannot reach (in place of its row)."""
    return f"Unable to determine the device handle for GPU{bus_id(gpu)[4:]}: Unknown Error\n"


def health_section(gpus: Iterable[SimGpu]) -> tuple[str, int]:
    """The lines of the health query and its exit status."""
    lines, rc = [_HEADER + "\n"], 0
    for gpu in gpus:
        if gpu.fault == "lost":
            lines.append(lost_line(gpu))
            rc = LOST_RC
            continue
        values = {
            "pci.bus_id": bus_id(gpu),
            "uuid": gpu.uuid,
            **_HEALTHY,
            **_FAULTY.get(gpu.fault, {}),
        }
        lines.append(", ".join(values[f] for f in HEALTH_FIELDS) + "\n")
    return "".join(lines), rc
