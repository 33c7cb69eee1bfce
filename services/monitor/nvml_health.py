"""GPU health through NVML (this machine): the counters the SSH probe's health query reads
(`gpu_health.py`), and XID errors, which NVML reports as events (over SSH they are in the kernel
log, which needs root).

`NvmlHealth(nvml).read()` gives a `HealthReading`; it keeps one NVML event set, registered for
XID critical errors on every GPU, and drains it without waiting at each read: an XID seen since
the last read is signal `xid` for that poll (a failed GPU then returns after it has read
healthy for [health] healthy_for_s). XIDs a program causes itself (13, 31, 43, 45: its own
faults, or their clean-up) are not the GPU's. NVML calls block: called in the reader's thread.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from services.monitor.gpu_health import GpuHealthReading, HealthReading, Signal

T = TypeVar("T")

HW_THERMAL = 0x40  # nvmlClocksThrottleReasonHwThermalSlowdown (…EventReason… in newer NVML)
SW_THERMAL = 0x20
HW_POWER_BRAKE = 0x80
XID_CRITICAL = 8  # nvmlEventTypeXidCriticalError
APPLICATION_XIDS = frozenset({13, 31, 43, 45})
MAX_EVENTS = 256  # drained per read at most


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class NvmlHealth:
    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self._events: Any = None
        self._registered: set[str] = set()

    def _optional(self, function: Callable[..., T], *args: Any) -> T | None:
        try:
            return function(*args)
        except (self.nvml.NVMLError, AttributeError):  # not supported, or an older binding
            return None

    def read(self) -> HealthReading:
        nvml = self.nvml
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError:
            return HealthReading()
        handles = {}
        for index in range(count):
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                handles[_text(nvml.nvmlDeviceGetUUID(handle))] = handle
            except nvml.NVMLError:
                continue  # lost: missing from the GPU reading, which says why
        xids = self._xids(handles)
        return HealthReading(
            tuple(
                GpuHealthReading(uuid, None, self._signals(handle, xids.get(uuid, ())))
                for uuid, handle in handles.items()
            )
        )

    def _signals(self, handle: Any, xids: tuple[int, ...]) -> tuple[tuple[Signal, str], ...]:
        nvml = self.nvml
        found: list[tuple[Signal, str]] = []
        ecc = self._optional(
            nvml.nvmlDeviceGetTotalEccErrors,
            handle,
            nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
            nvml.NVML_VOLATILE_ECC,
        )
        if ecc:
            found.append((Signal.ECC_UNCORRECTABLE, f"{ecc} uncorrectable ECC error(s)"))
        rows = self._optional(nvml.nvmlDeviceGetRemappedRows, handle)
        if rows is not None and rows[3]:
            found.append((Signal.ROW_REMAP_FAILURE, "row remapping failed"))
        if rows is not None and rows[2]:
            found.append((Signal.ROW_REMAP_PENDING, "row remapping pending (needs a GPU reset)"))
        if self._optional(nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle):
            found.append((Signal.RETIRED_PAGES_PENDING, "page retirement pending (needs a reset)"))
        reasons = self._clock_reasons(handle)
        thermal = [kind for kind, bit in (("HW", HW_THERMAL), ("SW", SW_THERMAL)) if reasons & bit]
        if thermal:
            found.append((Signal.THERMAL_SLOWDOWN, f"{'/'.join(thermal)} thermal clock slowdown"))
        if reasons & HW_POWER_BRAKE:
            found.append((Signal.POWER_BRAKE_SLOWDOWN, "power-brake clock slowdown"))
        width = self._optional(nvml.nvmlDeviceGetCurrPcieLinkWidth, handle)
        widest = self._optional(nvml.nvmlDeviceGetMaxPcieLinkWidth, handle)
        if width and widest and width < widest:
            found.append((Signal.PCIE_LINK_DEGRADED, f"PCIe link x{width} of x{widest}"))
        if xids:
            found.append((Signal.XID, f"XID {', '.join(map(str, xids))}"))
        return tuple(found)

    def _clock_reasons(self, handle: Any) -> int:
        nvml = self.nvml
        read = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None)
        if read is None:  # bindings before the rename
            read = getattr(nvml, "nvmlDeviceGetCurrentClocksThrottleReasons", None)
        return (self._optional(read, handle) if read is not None else None) or 0

    def _xids(self, handles: dict[str, Any]) -> dict[str, tuple[int, ...]]:
        """uuid -> the GPU's XIDs since the last read (not the programs' own)."""
        nvml = self.nvml
        if self._events is None:
            self._events = self._optional(nvml.nvmlEventSetCreate)
            if self._events is None:
                return {}
        for uuid, handle in handles.items():
            if uuid not in self._registered:
                self._registered.add(uuid)  # once, supported or not
                self._optional(nvml.nvmlDeviceRegisterEvents, handle, XID_CRITICAL, self._events)
        seen: dict[str, list[int]] = {}
        for _ in range(MAX_EVENTS):
            data = self._optional(nvml.nvmlEventSetWait, self._events, 0)
            if data is None:  # timed out: nothing more
                break
            xid = int(getattr(data, "eventData", 0))
            of = self._optional(nvml.nvmlDeviceGetUUID, data.device)
            if of is not None and xid not in APPLICATION_XIDS:
                seen.setdefault(_text(of), []).append(xid)
        return {uuid: tuple(sorted(set(xids))) for uuid, xids in seen.items()}
