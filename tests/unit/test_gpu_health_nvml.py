"""GPU health through NVML (FakeNvml): the same signals as the SSH probe's, and XID events."""

from __future__ import annotations

from datetime import UTC, datetime

from services.monitor.gpu_health import HealthRules, HostHealth, Signal
from services.monitor.nvml import FakeGpu, FakeNvml, read_gpus
from services.monitor.nvml_health import NvmlHealth
from services.monitor.probe import GpuStatus

T0 = datetime(2026, 11, 27, 12, 0, tzinfo=UTC)


def signals(health: NvmlHealth) -> dict[str | None, set[Signal]]:
    return {gpu.uuid: {s for s, _ in gpu.signals} for gpu in health.read().gpus}


def test_a_healthy_gpu_at_rest_like_the_h200() -> None:
    # the H200's read-out: ECC 0, remapped rows (0, 0, 0, 0), clock reasons 1 (idle), x16 of x16
    assert signals(NvmlHealth(FakeNvml([FakeGpu("GPU-h200")]))) == {"GPU-h200": set()}


def test_each_counter_is_its_signal() -> None:
    gpus = [
        FakeGpu("GPU-0", ecc_uncorrected=3),
        FakeGpu("GPU-1", remapped_rows=(0, 1, 1, 0)),
        FakeGpu("GPU-2", remapped_rows=(0, 0, 0, 1)),
        FakeGpu("GPU-3", clock_reasons=0x40 | 0x80),
        FakeGpu("GPU-4", pcie_width=(8, 16)),
        FakeGpu(
            "GPU-5",
            ecc_uncorrected=None,
            remapped_rows=None,
            clock_reasons=None,
            pcie_width=None,
        ),
    ]
    assert signals(NvmlHealth(FakeNvml(gpus))) == {
        "GPU-0": {Signal.ECC_UNCORRECTABLE},
        "GPU-1": {Signal.ROW_REMAP_PENDING},
        "GPU-2": {Signal.ROW_REMAP_FAILURE},
        "GPU-3": {Signal.THERMAL_SLOWDOWN, Signal.POWER_BRAKE_SLOWDOWN},
        "GPU-4": {Signal.PCIE_LINK_DEGRADED},
        "GPU-5": set(),  # nothing supported: nothing known, nothing wrong
    }


def test_xid_events_are_read_once_and_a_programs_own_are_not_the_gpus() -> None:
    gpu = FakeGpu("GPU-0", xids=[13, 79])
    health = NvmlHealth(FakeNvml([gpu]))
    (reading,) = health.read().gpus
    assert reading.signals == ((Signal.XID, "XID 79"),)
    assert signals(health) == {"GPU-0": set()}  # drained: the next read sees none
    gpu.xids.append(43)
    assert signals(health) == {"GPU-0": set()}


def test_a_lost_gpu_through_nvml_fails_and_the_others_are_still_read() -> None:
    nvml = FakeNvml([FakeGpu("GPU-0"), FakeGpu("GPU-1")])
    before = read_gpus(nvml)
    host = HostHealth("local", HealthRules())
    known = {gpu.uuid: gpu.index for gpu in before.gpus}
    host.observe(known, list(known), NvmlHealth(nvml).read(), None, T0)
    nvml.gpus[1].lost = True
    after = read_gpus(nvml)
    assert after.status is GpuStatus.ERROR and [g.uuid for g in after.gpus] == ["GPU-0"]
    assert after.error == "NVML: GPU 1: GPU is lost"
    events = host.observe(
        known, [g.uuid for g in after.gpus], NvmlHealth(nvml).read(), after.error, T0
    )
    assert [(e[1]["uuid"], e[1]["state"], e[1]["reason"]) for e in events] == [
        ("GPU-1", "failed", "not answering: NVML: GPU 1: GPU is lost")
    ]
