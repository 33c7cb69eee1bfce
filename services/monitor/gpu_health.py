"""GPU health: what the probes read of it, the rules that judge it, and each GPU's state (pure).

Both probes read the same signals in the same poll (no second round trip):

- over SSH, `HEALTH_SCRIPT` (part of `PROBE_COMMAND`) runs a second `nvidia-smi --query-gpu`
  for the health fields alone, so a field an older driver does not know never breaks the main
  GPU query; a driver that refuses a field is asked again without the row-remapper fields
  (drivers before R460); when even that fails the health of that poll is unknown, not "ok".
  Its section, with a header line (columns are read by name):

      @@health
      pci.bus_id, uuid, ecc.errors.uncorrected.volatile.total, ...
      00000000:00:06.0, GPU-..., 0, [N/A], No, No, Not Active, ...
      Unable to determine the device handle for GPU 0000:3B:00.0: Unknown Error
      @@health-rc <exit status>

- locally, NVML (`read_nvml_health`): the same counters, and XID critical-error events.

Signals (`Signal`): a GPU that is lost or does not answer while its host does, uncorrectable ECC
errors (volatile: since the driver loaded), a row remap pending or failed, retired pages pending
(GPUs before Ampere), a critical XID (NVML only: the kernel log that holds them needs root over
SSH), thermal or power-brake clock slowdown, a PCIe link narrower than the GPU's maximum.

`HealthRules` say which signals make a GPU degraded and which failed; `next_health` is the state
machine: a GPU becomes degraded or failed at once, a degraded one is ok again as soon as it
reads clean, and a failed one only after it has read healthy for `healthy_for` without a break.
`HostHealth` keeps the GPUs of one host and gives the `gpu.health_changed` events of a poll.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

# --- what the probe asks --------------------------------------------------------------------

HEALTH_FIELDS = (
    "pci.bus_id",
    "uuid",
    "ecc.errors.uncorrected.volatile.total",
    "retired_pages.pending",
    "remapped_rows.pending",
    "remapped_rows.failure",
    # the older names: every driver since R418 knows them (newer ones print clocks_event_...)
    "clocks_throttle_reasons.hw_thermal_slowdown",
    "clocks_throttle_reasons.sw_thermal_slowdown",
    "clocks_throttle_reasons.hw_power_brake_slowdown",
    "pcie.link.width.current",
    "pcie.link.width.max",
)
# Drivers before R460 know no row remapper: asked again without it.
LEGACY_HEALTH_FIELDS = tuple(f for f in HEALTH_FIELDS if not f.startswith("remapped_rows."))

HEALTH_SCRIPT = f"""\
echo '@@health'
health=$(nvidia-smi --query-gpu={",".join(HEALTH_FIELDS)} --format=csv,nounits 2>&1)
rc=$?
case $health in *'not a valid field'*)
health=$(nvidia-smi --query-gpu={",".join(LEGACY_HEALTH_FIELDS)} --format=csv,nounits 2>&1)
rc=$?;; esac
[ -n "$health" ] && printf '%s\\n' "$health"
echo "@@health-rc $rc"
"""


class Signal(StrEnum):
    LOST = "lost"
    ECC_UNCORRECTABLE = "ecc_uncorrectable"
    ROW_REMAP_PENDING = "row_remap_pending"
    ROW_REMAP_FAILURE = "row_remap_failure"
    RETIRED_PAGES_PENDING = "retired_pages_pending"
    XID = "xid"
    THERMAL_SLOWDOWN = "thermal_slowdown"
    POWER_BRAKE_SLOWDOWN = "power_brake_slowdown"
    PCIE_LINK_DEGRADED = "pcie_link_degraded"


SIGNALS = tuple(s.value for s in Signal)


class HealthState(StrEnum):
    OK = "ok"
    DEGRADED = "degraded"
    FAILED = "failed"


@dataclass(frozen=True)
class GpuHealthReading:
    """The health signals of one GPU at one poll: signal -> what was read (for the reason)."""

    uuid: str | None
    bus_id: str | None = None
    signals: tuple[tuple[Signal, str], ...] = ()


@dataclass(frozen=True)
class HealthReading:
    """The health part of one poll. `gpus` is empty when it could not be read (unknown)."""

    gpus: tuple[GpuHealthReading, ...] = ()
    lost_bus_ids: tuple[str, ...] = ()  # GPUs the driver named as lost or not answering
    lost_detail: str | None = None


# --- parsing the section ----------------------------------------------------------------------

_LOST_LINE = re.compile(
    r"unable to determine the device handle for gpu\s*([0-9a-f]+:[0-9a-f]+:[0-9a-f]+\.[0-9a-f])",
    re.IGNORECASE,
)
_UNIT = re.compile(r"\s*\[[^\]]*\]$")
_ALIASES = {"clocks_event_reasons": "clocks_throttle_reasons"}
_LOST_VALUE = "[gpu is lost]"
_NOT_READ = frozenset({"", "n/a", "[n/a]", "[not supported]", "[unknown error]", "[not found]"})


def bus_id(text: str) -> str:
    """A PCI bus id in one form: `00000000:3B:00.0` and `0000:3b:00.0` are the same GPU."""
    domain, _, rest = text.strip().partition(":")
    return f"{int(domain, 16) if domain else 0:04x}:{rest.lower()}"


def _column(name: str) -> str:
    name = _UNIT.sub("", name.strip())
    head, dot, tail = name.partition(".")
    return _ALIASES.get(head, head) + dot + tail


def _number(text: str) -> float | None:
    """A finite number, or None (`inf` and `nan` are no count of anything)."""
    try:
        value = float(text.strip())
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _read_bus_id(text: str) -> str | None:
    """A row's bus id, or None when it is not read or is no bus id."""
    if text.lower() in _NOT_READ or text.startswith("["):
        return None
    try:
        return bus_id(text)
    except ValueError:
        return None


def _yes(text: str | None) -> bool:
    return text is not None and text.strip().lower() in ("yes", "active")


def row_signals(row: Mapping[str, str]) -> tuple[tuple[Signal, str], ...]:
    """The signals one health row (column -> text) shows."""
    if any(value.strip().lower() == _LOST_VALUE for value in row.values()):
        return ((Signal.LOST, "the driver reports the GPU is lost"),)
    found: list[tuple[Signal, str]] = []
    ecc = _number(row.get("ecc.errors.uncorrected.volatile.total", ""))
    if ecc is not None and ecc > 0:
        found.append((Signal.ECC_UNCORRECTABLE, f"{int(ecc)} uncorrectable ECC error(s)"))
    if _yes(row.get("remapped_rows.failure")):
        found.append((Signal.ROW_REMAP_FAILURE, "row remapping failed"))
    if _yes(row.get("remapped_rows.pending")):
        found.append((Signal.ROW_REMAP_PENDING, "row remapping pending (needs a GPU reset)"))
    if _yes(row.get("retired_pages.pending")):
        found.append((Signal.RETIRED_PAGES_PENDING, "page retirement pending (needs a reset)"))
    thermal = [
        kind
        for kind in ("hw", "sw")
        if _yes(row.get(f"clocks_throttle_reasons.{kind}_thermal_slowdown"))
    ]
    if thermal:
        found.append(
            (Signal.THERMAL_SLOWDOWN, f"{'/'.join(thermal).upper()} thermal clock slowdown")
        )
    if _yes(row.get("clocks_throttle_reasons.hw_power_brake_slowdown")):
        found.append((Signal.POWER_BRAKE_SLOWDOWN, "power-brake clock slowdown"))
    width = _number(row.get("pcie.link.width.current", ""))
    widest = _number(row.get("pcie.link.width.max", ""))
    if width is not None and widest is not None and 0 < width < widest:
        found.append((Signal.PCIE_LINK_DEGRADED, f"PCIe link x{int(width)} of x{int(widest)}"))
    return tuple(found)


def parse_health_section(lines: Sequence[str]) -> HealthReading:
    """The `@@health` section: one reading per GPU row, and the GPUs the driver named lost.
    Never raises; rows are read whatever the exit status (a lost GPU fails the query, not the
    other GPUs' rows); a section without a header (the query failed) gives no GPU readings."""
    columns: list[str] | None = None
    gpus: list[GpuHealthReading] = []
    lost: list[str] = []
    detail = None
    for line in lines:
        found = _LOST_LINE.search(line)
        if found:
            lost.append(bus_id(found.group(1)))
            detail = detail or line.strip()[:200]
            continue
        parts = [part.strip() for part in line.split(",")]
        if columns is None:
            if "pci.bus_id" in parts or "uuid" in parts:
                columns = [_column(part) for part in parts]
            continue
        if len(parts) != len(columns):
            continue
        row = dict(zip(columns, parts, strict=True))
        uuid = row.get("uuid", "")
        bus = row.get("pci.bus_id", "")
        gpus.append(
            GpuHealthReading(
                uuid=None if uuid.lower() in _NOT_READ or uuid.startswith("[") else uuid,
                bus_id=_read_bus_id(bus),
                signals=row_signals(row),
            )
        )
    return HealthReading(tuple(gpus), tuple(lost), detail)


# --- the rules -------------------------------------------------------------------------------

DEFAULT_FAILED = (
    Signal.LOST,
    Signal.ECC_UNCORRECTABLE,
    Signal.ROW_REMAP_FAILURE,
    Signal.ROW_REMAP_PENDING,
    Signal.RETIRED_PAGES_PENDING,
    Signal.XID,
)
DEFAULT_DEGRADED = (
    Signal.THERMAL_SLOWDOWN,
    Signal.POWER_BRAKE_SLOWDOWN,
    Signal.PCIE_LINK_DEGRADED,
)


@dataclass(frozen=True)
class HealthRules:
    """Which signals make a GPU failed, which degraded (a signal in neither is ignored), and
    how long a failed GPU must read healthy before it returns to the pool."""

    failed: frozenset[Signal] = frozenset(DEFAULT_FAILED)
    degraded: frozenset[Signal] = frozenset(DEFAULT_DEGRADED)
    healthy_for: timedelta = timedelta(minutes=10)

    @classmethod
    def from_names(
        cls, failed: Iterable[str], degraded: Iterable[str], healthy_for_s: float
    ) -> HealthRules:
        """From the `[health]` settings (names checked there); failed wins over degraded."""
        failed_set = frozenset(Signal(name) for name in failed)
        return cls(
            failed=failed_set,
            degraded=frozenset(Signal(name) for name in degraded) - failed_set,
            healthy_for=timedelta(seconds=healthy_for_s),
        )

    def judge(self, signals: Iterable[tuple[Signal, str]]) -> tuple[HealthState, str | None]:
        """The state a set of signals means, and its reason (the signals that decided it)."""
        signals = list(signals)
        for state, which in (
            (HealthState.FAILED, self.failed),
            (HealthState.DEGRADED, self.degraded),
        ):
            reasons = [detail for signal, detail in signals if signal in which]
            if reasons:
                return state, "; ".join(reasons)
        return HealthState.OK, None


@dataclass(frozen=True)
class GpuHealth:
    """A GPU's health: its state, why, since when; `healthy_since`: a failed GPU has read
    healthy since then (it returns at `healthy_since + healthy_for`)."""

    state: HealthState
    reason: str | None
    since: datetime
    healthy_since: datetime | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"state": self.state.value, "reason": self.reason, "since": self.since.isoformat()}


def next_health(
    current: GpuHealth | None,
    signals: Iterable[tuple[Signal, str]],
    at: datetime,
    rules: HealthRules,
) -> GpuHealth:
    """A GPU's health after a reading of its signals at `at`."""
    state, reason = rules.judge(signals)
    if current is None:
        return GpuHealth(state, reason, at)
    if current.state is HealthState.FAILED and state is not HealthState.FAILED:
        healthy_since = current.healthy_since or at
        if at - healthy_since < rules.healthy_for:
            return replace(current, healthy_since=healthy_since)
        return GpuHealth(state, reason, at)
    if state is current.state:
        return replace(current, reason=reason, healthy_since=None)
    return GpuHealth(state, reason, at)


# --- one host -------------------------------------------------------------------------------


@dataclass
class HostHealth:
    """The health of one host's GPUs, poll after poll."""

    host: str
    rules: HealthRules
    gpus: dict[str, GpuHealth] = field(default_factory=dict)
    index: dict[str, int | None] = field(default_factory=dict)
    buses: dict[str, str] = field(default_factory=dict)  # bus id -> uuid

    def observe(
        self,
        known: Mapping[str, int | None],
        rows: Iterable[str],
        health: HealthReading | None,
        gpu_error: str | None,
        at: datetime,
    ) -> list[tuple[str, dict[str, Any]]]:
        """One poll of a host that answered: `known` its GPUs (uuid -> index) as the monitor
        knows them, `rows` the uuids its GPU query listed, `health` the health section (None:
        not read), `gpu_error` the GPU query's error (None: it worked). A known GPU missing
        from the rows of a failed query is lost; a GPU whose health was not read is left as it
        was. Returns the `gpu.health_changed` events: of each GPU whose state changed, and of
        each GPU read for the first time here (`previous` null) that is not ok, so that a
        restarted or newly assigned monitor tells every consumer of the GPUs it found degraded
        or failed (an ok one is what consumers assume: announcing each of thousands of GPUs
        when a replica starts or takes over would double its first polls' events)."""
        listed = set(rows)
        by_uuid: dict[str, GpuHealthReading] = {}
        lost_buses: set[str] = set()
        if health is not None:
            lost_buses = set(health.lost_bus_ids)
            for reading in health.gpus:
                uuid = reading.uuid or self.buses.get(reading.bus_id or "")
                if uuid is not None:
                    by_uuid[uuid] = reading
                    if reading.bus_id is not None:
                        self.buses[reading.bus_id] = uuid
        lost_uuids = {self.buses[bus] for bus in lost_buses if bus in self.buses}
        events = []
        for uuid, index in known.items():
            self.index[uuid] = index
            signals = self._signals(uuid, listed, by_uuid, lost_uuids, health, gpu_error)
            if signals is None:
                continue
            before = self.gpus.get(uuid)
            after = self.gpus[uuid] = next_health(before, signals, at, self.rules)
            if before is None and after.state is HealthState.OK:
                continue  # an ok GPU read the first time: what every consumer takes by default
            if before is None or before.state is not after.state:
                events.append(self.event(uuid, after, before))
        return events

    def _signals(
        self,
        uuid: str,
        listed: set[str],
        by_uuid: Mapping[str, GpuHealthReading],
        lost_uuids: set[str],
        health: HealthReading | None,
        gpu_error: str | None,
    ) -> tuple[tuple[Signal, str], ...] | None:
        if uuid in lost_uuids or (uuid not in listed and gpu_error is not None):
            detail = (health.lost_detail if health and uuid in lost_uuids else None) or gpu_error
            return ((Signal.LOST, f"not answering: {detail}"),)
        reading = by_uuid.get(uuid)
        return None if reading is None else reading.signals

    def event(
        self, uuid: str, health: GpuHealth, before: GpuHealth | None
    ) -> tuple[str, dict[str, Any]]:
        return (
            "gpu.health_changed",
            {
                "host": self.host,
                "uuid": uuid,
                "index": self.index.get(uuid),
                **health.to_dict(),
                "previous": before.state.value if before else None,
            },
        )

    def entries(self) -> dict[str, dict[str, Any]]:
        """uuid -> {index, state, reason, since} for the hosts' snapshot."""
        return {
            uuid: {"index": self.index.get(uuid), **health.to_dict()}
            for uuid, health in self.gpus.items()
        }
