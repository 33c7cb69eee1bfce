"""The events the monitor publishes: GPUs found and lost, host and process readings, outages."""

from __future__ import annotations

from marshmallow import fields, validate

from services.shared.contracts.schema import Integer, NonEmpty, Number, Str, Strict
from services.shared.contracts.validation import EventType


class HostRef(Strict):
    host = Str(required=True, validate=NonEmpty)


GPU_STATUSES = ("ok", "no_gpu", "no_nvidia_smi", "error")


class GpuDiscovered(HostRef):
    uuid = Str(required=True, validate=NonEmpty)
    index = Integer(required=True, validate=validate.Range(min=0))
    name = Str(required=True)
    memory_total_mib = Number(required=True, allow_none=True)
    mig_parent_uuid = Str(load_default=None, allow_none=True)


class GpuDisappeared(HostRef):
    uuid = Str(required=True, validate=NonEmpty)
    index = Integer(required=True, allow_none=True)
    at = fields.AwareDateTime(required=True)


GPU_HEALTH_STATES = ("ok", "degraded", "failed")


class GpuHealthChanged(HostRef):
    """A GPU's health state: ok, degraded (marked, still in the pool) or failed (out of the
    pool until it reads healthy for `[health] healthy_for_s`)."""

    uuid = Str(required=True, validate=NonEmpty)
    index = Integer(required=True, allow_none=True)
    state = Str(required=True, validate=validate.OneOf(GPU_HEALTH_STATES))
    reason = Str(required=True, allow_none=True)  # the signals that decided it; null when ok
    since = fields.AwareDateTime(required=True)
    # The state before; null: the first reading of this GPU by this monitor (after a start, or
    # when its host moved to another monitor replica).
    previous = Str(load_default=None, allow_none=True, validate=validate.OneOf(GPU_HEALTH_STATES))


class GpuSample(Strict):
    """One GPU at one tick. A figure the GPU does not report is null, never 0."""

    uuid = Str(required=True, validate=NonEmpty)
    index = Integer(required=True)
    name = Str(load_default=None, allow_none=True)
    utilization_gpu_percent = Number(allow_none=True, load_default=None)
    utilization_memory_percent = Number(allow_none=True, load_default=None)
    memory_used_mib = Number(allow_none=True, load_default=None)
    memory_total_mib = Number(allow_none=True, load_default=None)
    temperature_c = Number(allow_none=True, load_default=None)
    power_draw_w = Number(allow_none=True, load_default=None)
    power_limit_w = Number(allow_none=True, load_default=None)
    fan_speed_percent = Number(allow_none=True, load_default=None)
    clock_sm_mhz = Number(allow_none=True, load_default=None)
    clock_memory_mhz = Number(allow_none=True, load_default=None)


class HostSampled(HostRef):
    sampled_at = fields.AwareDateTime(required=True)
    cpu_percent = Number(allow_none=True, load_default=None)
    load_1m = Number(allow_none=True, load_default=None)
    load_5m = Number(allow_none=True, load_default=None)
    load_15m = Number(allow_none=True, load_default=None)
    memory_used_mib = Number(allow_none=True, load_default=None)
    memory_total_mib = Number(allow_none=True, load_default=None)
    # ok | no_gpu | no_nvidia_smi | error: why `gpus` may be empty.
    gpu_status = Str(load_default="ok", validate=validate.OneOf(GPU_STATUSES))
    gpu_error = Str(allow_none=True, load_default=None)
    gpus = fields.List(fields.Nested(GpuSample), required=True)


class GpuProcess(Strict):
    gpu_uuid = Str(required=True, validate=NonEmpty)
    pid = Integer(required=True, validate=validate.Range(min=0))
    user = Str(required=True, allow_none=True)
    command = Str(required=True)
    used_memory_mib = Number(allow_none=True, load_default=None)
    started_at = fields.AwareDateTime(allow_none=True, load_default=None)


class ProcessesObserved(HostRef):
    """The whole truth about GPU processes on one host at one time (not a delta)."""

    observed_at = fields.AwareDateTime(required=True)
    processes = fields.List(fields.Nested(GpuProcess), required=True)


class HostUnreachable(HostRef):
    since = fields.AwareDateTime(required=True)
    reason = Str(required=True)


class HostRecovered(HostRef):
    at = fields.AwareDateTime(required=True)
    down_since = fields.AwareDateTime(allow_none=True, load_default=None)


HOST_SOURCES = ("config", "api", "local")


class HostRecord(Strict):
    """A host Warden watches, as the monitor's inventory holds it (no secret in it: `key_file`
    is a path on the head node, `host_key` the host's public key)."""

    name = Str(required=True, validate=NonEmpty)
    address = Str(required=True)
    port = Integer(required=True, validate=validate.Range(min=1, max=65535))
    user = Str(required=True)
    key_file = Str(required=True)
    probe = Str(required=True, validate=validate.OneOf(("ssh", "nvml")))
    labels = fields.List(Str(validate=NonEmpty), required=True)
    # The accepted host key as in known_hosts ("ssh-ed25519 AAAA..."); null: [ssh] known_hosts.
    host_key = Str(required=True, allow_none=True)
    # config: seeded from [[hosts]]; api: added or edited through the API; local: this machine.
    source = Str(required=True, validate=validate.OneOf(HOST_SOURCES))


class HostChanged(Strict):
    host = fields.Nested(HostRecord, required=True)


class HostRemoved(HostRef):
    pass


class TopologyGpu(Strict):
    """One GPU's row of `nvidia-smi topo -m`: its link to each GPU of the matrix, in order
    ("X" itself, "NV4", "PIX", "PXB", "PHB", "NODE", "SYS"), its CPU and NUMA affinity."""

    index = Integer(required=True, validate=validate.Range(min=0))
    links = fields.List(Str(), required=True)
    cpu_affinity = Str(required=True, allow_none=True)
    numa_node = Integer(required=True, allow_none=True)


class TopologyMatrix(Strict):
    gpus = fields.List(fields.Nested(TopologyGpu), required=True)


class HostTopologyRead(HostRef):
    read_at = fields.AwareDateTime(required=True)
    # null: the host printed no matrix (no GPU, one GPU on some drivers, nvidia-smi failed)
    topology = fields.Nested(TopologyMatrix, required=True, allow_none=True)


EVENTS: tuple[EventType, ...] = (
    EventType(
        "gpu.discovered",
        1,
        "monitor",
        GpuDiscovered,
        "A GPU was seen for the first time, or its identity (index, name, memory) changed.",
    ),
    EventType(
        "gpu.disappeared",
        1,
        "monitor",
        GpuDisappeared,
        "A GPU seen before is missing from its host's reading (the host itself answered).",
    ),
    EventType(
        "gpu.health_changed",
        1,
        "monitor",
        GpuHealthChanged,
        "A GPU's health changed (ok, degraded, failed) with its reason and since when; also "
        "sent for a GPU a monitor reads for the first time degraded or failed (`previous` null).",
    ),
    EventType(
        "host.sampled",
        1,
        "monitor",
        HostSampled,
        "CPU and every GPU's figures of one host at one tick.",
    ),
    EventType(
        "processes.observed",
        1,
        "monitor",
        ProcessesObserved,
        "The complete list of GPU processes of one host at one tick.",
    ),
    EventType(
        "host.unreachable",
        1,
        "monitor",
        HostUnreachable,
        "A host stopped answering polls (sent once per outage, and again with the same `since` "
        "when the reason becomes one that needs a person, such as a changed host key).",
    ),
    EventType(
        "host.recovered",
        1,
        "monitor",
        HostRecovered,
        "A host that was unreachable answers again (sent once per outage).",
    ),
    EventType(
        "host.added",
        1,
        "monitor",
        HostChanged,
        "A host joined the inventory (API, CLI, UI or a [[hosts]] seed); it is polled from now.",
    ),
    EventType(
        "host.updated",
        1,
        "monitor",
        HostChanged,
        "A host's address, login, labels or accepted host key changed.",
    ),
    EventType(
        "host.removed",
        1,
        "monitor",
        HostRemoved,
        "A host left the inventory: it is no longer polled (its reservations and history stay).",
    ),
    EventType(
        "host.topology_read",
        1,
        "monitor",
        HostTopologyRead,
        "A host's GPU interconnect (`nvidia-smi topo -m`) as read on its first poll, every 10 "
        "minutes after and when its GPUs change (sent each time it is read, changed or not).",
    ),
)
