"""Every message Warden sends, declared once: event types, their versions and data schemas.

Events travel in an envelope (DESIGN.md §3)::

    {"id": uuid, "type": "violation.opened", "version": 1,
     "occurred_at": ISO-8601 UTC, "source": "violations", "data": {...}}

`data` is always in wire form (JSON values; times as ISO-8601 strings with offset) and is
validated against the schema of its (type, version). A publisher that sends data not matching
its schema has a bug: `make_envelope` raises `ContractError`. A consumer validates what
arrives from the wire with `parse_envelope` and dead-letters what does not fit.

A compatible change (a new optional field) keeps the version: consumers ignore fields they do
not know. An incompatible change adds a new version beside the old one; consumers keep
working on the old one until they move.

Import from here; the modules behind it are the schemas of each publishing service
(`monitor`, `reservations`, `jobs`, `violations`), their building blocks (`schema`), how data
is checked (`validation`), the list of all types (`registry`), the `envelope` and `rpc` names.
"""

from __future__ import annotations

from services.shared.contracts.envelope import (
    Envelope,
    make_envelope,
    parse_envelope,
    utc_now_iso,
)
from services.shared.contracts.jobs import (
    JOB_STATUSES,
    TASK_STATUSES,
    JobChanged,
    JobData,
    JobStatusChanged,
    TaskData,
    TaskStatusChanged,
)
from services.shared.contracts.monitor import (
    GPU_STATUSES,
    HOST_SOURCES,
    GpuDisappeared,
    GpuDiscovered,
    GpuProcess,
    GpuSample,
    HostChanged,
    HostRecord,
    HostRecovered,
    HostRef,
    HostRemoved,
    HostSampled,
    HostUnreachable,
    ProcessesObserved,
)
from services.shared.contracts.registry import EVENT_TYPES, event_type
from services.shared.contracts.reservations import (
    RESERVATION_STATUSES,
    AccessChanged,
    GpuRef,
    ReservationCancelled,
    ReservationData,
    ReservationEnded,
    ReservationUpdated,
    SessionRevoked,
    UsageSummary,
    UserData,
    UserUpdated,
)
from services.shared.contracts.rpc import HEALTH_METHOD
from services.shared.contracts.validation import EventType, _known_fields_only
from services.shared.contracts.violations import (
    VIOLATION_MODES,
    OffendingProcess,
    UpcomingStep,
    ViolationContext,
    ViolationEscalated,
    ViolationResolved,
)

__all__ = [
    "EVENT_TYPES",
    "GPU_STATUSES",
    "HEALTH_METHOD",
    "HOST_SOURCES",
    "JOB_STATUSES",
    "RESERVATION_STATUSES",
    "TASK_STATUSES",
    "VIOLATION_MODES",
    "AccessChanged",
    "Envelope",
    "EventType",
    "GpuDisappeared",
    "GpuDiscovered",
    "GpuProcess",
    "GpuRef",
    "GpuSample",
    "HostChanged",
    "HostRecord",
    "HostRecovered",
    "HostRef",
    "HostRemoved",
    "HostSampled",
    "HostUnreachable",
    "JobChanged",
    "JobData",
    "JobStatusChanged",
    "OffendingProcess",
    "ProcessesObserved",
    "ReservationCancelled",
    "ReservationData",
    "ReservationEnded",
    "ReservationUpdated",
    "SessionRevoked",
    "TaskData",
    "TaskStatusChanged",
    "UpcomingStep",
    "UsageSummary",
    "UserData",
    "UserUpdated",
    "ViolationContext",
    "ViolationEscalated",
    "ViolationResolved",
    "_known_fields_only",  # the fast-path test compares it with marshmallow
    "event_type",
    "make_envelope",
    "parse_envelope",
    "utc_now_iso",
]
