"""The shared contracts: declared event types, publish-side validation, wire parsing."""

from __future__ import annotations

import json
import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest
from marshmallow import RAISE, Schema

from services.shared.contracts import (
    EVENT_TYPES,
    Envelope,
    event_type,
    make_envelope,
    parse_envelope,
)
from services.shared.errors import ContractError

NOW = "2024-05-01T12:00:00+00:00"

_VIOLATION = {
    "incident_id": "inc-1",
    "host": "gpu-01",
    "gpu_uuid": "GPU-0000",
    "gpu_index": 0,
    "offender": "mallory",
    "pids": [4242],
    "commands": ["python train.py"],
    "reservation_id": 1,
    "owner": "alice",
    "reservation_start": NOW,
    "reservation_end": "2024-05-01T14:00:00+00:00",
    "since": NOW,
}

_TASK = {
    "index": 0,
    "host": "gpu-01",
    "gpus": ["GPU-0000"],
    "status": "pending",
    "session": "warden-12-0",
}
_JOB = {
    "id": 12,
    "owner": "alice",
    "name": "train",
    "status": "queued",
    "queued": True,
    "tasks": [_TASK],
    "created_at": NOW,
    "updated_at": NOW,
}

_RESERVATION = {
    "id": 7,
    "owner": "alice",
    "gpus": [{"uuid": "GPU-0000", "host": "gpu-01", "index": 0}],
    "start": NOW,
    "end": "2024-05-01T14:00:00+00:00",
    "title": "ablation",
    "description": "",
    "status": "active",
    "created_by": "alice",
}
_USER = {"username": "alice", "email": "alice@lab.example", "roles": ["user"], "groups": ["phd"]}

# One valid example per declared type: a new type without an example fails
# test_every_type_has_an_example, so every type gets the checks below.
_HOST_RECORD = {
    "name": "gpu-01",
    "address": "gpu-01.lab.example",
    "port": 22,
    "user": "warden",
    "key_file": "",
    "probe": "ssh",
    "labels": ["a100"],
    "host_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl",
    "source": "api",
}
_MAINTENANCE: dict[str, Any] = {
    "id": 3,
    "host": "dgx1",
    "gpus": [0, 1],
    "target": "dgx1:0,1",
    "start": NOW,
    "end": None,
    "reason": "new fan",
    "bookings": "keep",
    "stop_jobs": False,
    "created_by": "admin",
    "created_at": NOW,
    "ended_by": None,
    "status": "scheduled",
}

EXAMPLES: dict[str, dict[str, Any]] = {
    "gpu.discovered": {
        "host": "gpu-01",
        "uuid": "GPU-0000",
        "index": 0,
        "name": "NVIDIA A100-SXM4-40GB",
        "memory_total_mib": 40960.0,
        "mig_parent_uuid": None,
    },
    "host.sampled": {
        "host": "gpu-01",
        "sampled_at": NOW,
        "cpu_percent": 12.5,
        "load_1m": 0.5,
        "memory_used_mib": 2048.0,
        "memory_total_mib": 65536.0,
        "gpus": [
            {
                "uuid": "GPU-0000",
                "index": 0,
                "name": "NVIDIA A100",
                "utilization_gpu_percent": 87.0,
                "memory_used_mib": 30000.0,
                "memory_total_mib": 40960.0,
                "temperature_c": 61.0,
                "power_draw_w": 250.5,
            }
        ],
    },
    "processes.observed": {
        "host": "gpu-01",
        "observed_at": NOW,
        "processes": [
            {
                "gpu_uuid": "GPU-0000",
                "pid": 4242,
                "user": "mallory",
                "command": "python train.py",
                "used_memory_mib": 1024.0,
                "started_at": NOW,
            }
        ],
    },
    "gpu.disappeared": {"host": "gpu-01", "uuid": "GPU-0000", "index": 0, "at": NOW},
    "gpu.health_changed": {
        "host": "gpu-01",
        "uuid": "GPU-0000",
        "index": 0,
        "state": "failed",
        "reason": "2 uncorrectable ECC error(s)",
        "since": NOW,
        "previous": "ok",
    },
    "host.unreachable": {"host": "gpu-01", "since": NOW, "reason": "ssh timed out"},
    "host.recovered": {"host": "gpu-01", "at": NOW, "down_since": NOW},
    "host.added": {"host": dict(_HOST_RECORD)},
    "host.updated": {"host": {**_HOST_RECORD, "labels": ["a100", "lab-b"]}},
    "host.removed": {"host": "gpu-01"},
    "host.topology_read": {
        "host": "gpu-01",
        "read_at": NOW,
        "topology": {
            "gpus": [
                {"index": 0, "links": ["X", "NV4"], "cpu_affinity": "0-31", "numa_node": 0},
                {"index": 1, "links": ["NV4", "X"], "cpu_affinity": "0-31", "numa_node": 0},
            ]
        },
    },
    "violation.opened": dict(_VIOLATION),
    "reservation.created": dict(_RESERVATION),
    "reservation.updated": {**_RESERVATION, "changed": ["title"], "actor": "alice"},
    "reservation.cancelled": {
        **_RESERVATION,
        "status": "cancelled",
        "cancelled_at": NOW,
        "cancelled_by": "admin",
        "cancel_reason": "maintenance",
        "by_rules": False,
    },
    "reservation.started": dict(_RESERVATION),
    "reservation.released_idle": {
        **_RESERVATION,
        "reason": "idle",
        "released_by": "warden",
        "idle_since": NOW,
        "notified_at": NOW,
        "snoozed_until": None,
        "released_at": NOW,
    },
    "reservation.ended": {
        **_RESERVATION,
        "usage": {
            "samples": 120,
            "avg_utilization_percent": 81.5,
            "peak_utilization_percent": 100.0,
            "avg_memory_used_mib": 20000.0,
            "peak_memory_used_mib": 30000.0,
            "idle_share": 0.05,
            "first_sample_at": NOW,
            "last_sample_at": NOW,
        },
    },
    "access.changed": {
        "cause": "rule.updated",
        "rule_id": 3,
        "actor": "admin",
        "cancelled": [7],
        "restored": [],
    },
    "maintenance.scheduled": {
        **_MAINTENANCE,
        "affected": [
            {
                "reservation_id": 7,
                "owner": "alice",
                "title": "sweep",
                "start": NOW,
                "end": NOW,
                "outcome": "kept",
                "alternative": {
                    "start": NOW,
                    "end": NOW,
                    "gpus": [{"uuid": "GPU-1", "host": "dgx2", "index": 0}],
                },
                "moved_to": None,
            }
        ],
    },
    "maintenance.ended": {**_MAINTENANCE, "ended_by": "admin", "status": "ended"},
    "user.created": dict(_USER),
    "user.updated": {**_USER, "changed": ["roles"]},
    "user.deleted": dict(_USER),
    "session.revoked": {"username": "alice", "session": "8f2c", "at": NOW},
    "violation.escalated": {**_VIOLATION, "step": "email_owner", "step_index": 1},
    "violation.resolved": {**_VIOLATION, "resolved_at": NOW, "reason": "process ended"},
    "notification.sent": {
        "id": "17",
        "user": "alice",
        "kind": "reservation_idle",
        "title": "Your GPUs are idle",
        "text": "Keep the reservation?",
        "links": [{"label": "I still need it", "url": "https://warden.lab/keep/1"}],
        "at": NOW,
    },
    "replica.heartbeat": {
        "service": "monitor",
        "replica": "monitor@head:4242-a1b2c3",
        "role": "active",
        "started_at": NOW,
        "interval_s": 2.0,
        "details": {"hosts": 12},
    },
    "job.created": {**_JOB, "actor": "alice"},
    "job.updated": {**_JOB, "actor": "alice", "changed": ["queued"]},
    "job.deleted": {**_JOB, "actor": "admin"},
    "job.status_changed": {**_JOB, "status": "running", "previous_status": "starting"},
    "task.status_changed": {
        "job_id": 12,
        "owner": "alice",
        "task": {**_TASK, "status": "failed", "exit_code": 3, "reason": "exit code 3"},
        "previous_status": "running",
        "at": NOW,
    },
    "queue.changed": {
        "policy": "fair",
        "half_life_h": 168.0,
        "horizon_h": 168.0,
        "at": NOW,
        "jobs": [
            {
                "id": 12,
                "owner": "alice",
                "name": "train",
                "position": 1,
                "gpus": 2,
                "enqueued_at": NOW,
                "max_runtime_s": 3600.0,
                "reason": "no host has 2 free GPUs for 1 h",
                "predicted_start": NOW,
            }
        ],
        "users": [{"user": "alice", "share": 0.5, "usage_gpu_h": 3.5, "queued": 1, "running": 0}],
    },
}

TYPE_NAMES = sorted({t.name for t in EVENT_TYPES})


def _wire(type_name: str, **changes: Any) -> dict[str, Any]:
    raw = make_envelope(type_name, EXAMPLES[type_name]).to_dict()
    raw.update(changes)
    return raw


# --- the registry -----------------------------------------------------------------------------


def test_every_type_has_an_example() -> None:
    assert set(EXAMPLES) == set(TYPE_NAMES)


@pytest.mark.parametrize("etype", EVENT_TYPES, ids=lambda t: f"{t.name}-v{t.version}")
def test_every_declared_type_is_well_formed(etype: Any) -> None:
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*\.[a-z]+(_[a-z]+)*", etype.name), etype.name
    assert isinstance(etype.version, int) and etype.version >= 1
    assert re.fullmatch(r"[a-z]+|\*", etype.source)  # *: every service, named in its data
    assert etype.description.strip()
    assert issubclass(etype.schema, Schema)
    schema = etype.schema()
    assert schema.unknown == RAISE  # publishers may not send fields nobody declared
    assert schema.fields, "a schema without fields"
    assert any(f.required for f in schema.fields.values()), "nothing required"
    assert event_type(etype.name, etype.version) is etype


def test_types_are_declared_once_and_latest_wins() -> None:
    keys = [(t.name, t.version) for t in EVENT_TYPES]
    assert len(keys) == len(set(keys))
    for name in TYPE_NAMES:
        latest = max(t.version for t in EVENT_TYPES if t.name == name)
        assert event_type(name).version == latest
        sources = {t.source for t in EVENT_TYPES if t.name == name}
        assert len(sources) == 1, f"{name} is published by more than one service"


def test_a_heartbeat_is_published_by_the_service_it_names() -> None:
    example = EXAMPLES["replica.heartbeat"]
    assert make_envelope("replica.heartbeat", example, source="monitor").source == "monitor"
    with pytest.raises(ContractError):
        make_envelope("replica.heartbeat", example, source="jobs")


def test_unknown_type_and_version_are_contract_errors() -> None:
    with pytest.raises(ContractError):
        event_type("host.exploded")
    with pytest.raises(ContractError) as err:
        event_type("host.sampled", 99)
    assert err.value.details == {"type": "host.sampled", "version": 99}


# --- make_envelope: the publisher's side ------------------------------------------------------


@pytest.mark.parametrize("type_name", TYPE_NAMES)
def test_make_envelope_accepts_the_example(type_name: str) -> None:
    envelope = make_envelope(type_name, EXAMPLES[type_name])
    declared = event_type(type_name)
    assert envelope.type == type_name
    assert envelope.version == declared.version
    # A type every service publishes (*) is sent by the service its data names.
    assert envelope.source == (
        EXAMPLES[type_name]["service"] if declared.source == "*" else declared.source
    )
    assert envelope.data == EXAMPLES[type_name]
    uuid.UUID(envelope.id)
    occurred = datetime.fromisoformat(envelope.occurred_at)
    offset = occurred.utcoffset()
    assert offset is not None and offset.total_seconds() == 0


def test_make_envelope_gives_each_event_its_own_id() -> None:
    ids = {make_envelope("host.unreachable", EXAMPLES["host.unreachable"]).id for _ in range(50)}
    assert len(ids) == 50


@pytest.mark.parametrize("type_name", TYPE_NAMES)
def test_make_envelope_rejects_each_missing_required_field(type_name: str) -> None:
    required = [n for n, f in event_type(type_name).schema().fields.items() if f.required]
    for name in required:
        data = {k: v for k, v in EXAMPLES[type_name].items() if k != name}
        with pytest.raises(ContractError) as err:
            make_envelope(type_name, data)
        assert name in err.value.details["errors"], name


@pytest.mark.parametrize(
    ("type_name", "changes", "bad_key"),
    [
        ("gpu.discovered", {"index": "zero"}, "index"),
        ("gpu.discovered", {"index": -1}, "index"),
        ("gpu.discovered", {"host": ""}, "host"),
        ("host.unreachable", {"reason": 5}, "reason"),
        ("host.unreachable", {"since": "yesterday"}, "since"),
        ("host.unreachable", {"since": "2024-05-01T12:00:00"}, "since"),  # naive time
        ("host.sampled", {"gpus": "none"}, "gpus"),
        ("host.sampled", {"cpu_percent": "lots"}, "cpu_percent"),
        ("host.sampled", {"cpu_percent": float("nan")}, "cpu_percent"),
        ("processes.observed", {"processes": [{"pid": 1}]}, "processes"),
        ("violation.opened", {"pids": ["a"]}, "pids"),
        ("violation.escalated", {"step_index": -1}, "step_index"),
    ],
)
def test_make_envelope_rejects_wrong_types(
    type_name: str, changes: dict[str, Any], bad_key: str
) -> None:
    with pytest.raises(ContractError) as err:
        make_envelope(type_name, {**EXAMPLES[type_name], **changes})
    assert bad_key in err.value.details["errors"]


def test_make_envelope_rejects_unknown_fields() -> None:
    with pytest.raises(ContractError) as err:
        make_envelope("host.unreachable", {**EXAMPLES["host.unreachable"], "surprise": 1})
    assert "surprise" in err.value.details["errors"]

    sample = EXAMPLES["host.sampled"]
    gpus = [{**sample["gpus"][0], "surprise": 1}]
    with pytest.raises(ContractError):
        make_envelope("host.sampled", {**sample, "gpus": gpus})


def test_make_envelope_rejects_data_that_is_not_an_object() -> None:
    with pytest.raises(ContractError):
        make_envelope("host.unreachable", ["gpu-01"])  # type: ignore[arg-type]


def test_make_envelope_checks_type_version_and_source() -> None:
    data = EXAMPLES["host.unreachable"]
    with pytest.raises(ContractError):
        make_envelope("host.exploded", data)
    with pytest.raises(ContractError):
        make_envelope("host.unreachable", data, version=2)
    with pytest.raises(ContractError) as err:
        make_envelope("host.unreachable", data, source="violations")
    assert err.value.details == {"type": "host.unreachable", "source": "violations"}
    assert make_envelope("host.unreachable", data, version=1, source="monitor").version == 1


def test_null_metrics_are_accepted_and_stay_null() -> None:
    """A figure the GPU does not report is null, never turned into 0."""
    gpu = {
        "uuid": "GPU-0000",
        "index": 0,
        "name": None,
        "utilization_gpu_percent": None,
        "utilization_memory_percent": None,
        "memory_used_mib": None,
        "memory_total_mib": None,
        "temperature_c": None,
        "power_draw_w": None,
        "power_limit_w": None,
        "fan_speed_percent": None,
        "clock_sm_mhz": None,
        "clock_memory_mhz": None,
    }
    data = {
        "host": "gpu-01",
        "sampled_at": NOW,
        "cpu_percent": None,
        "load_1m": None,
        "memory_used_mib": None,
        "gpus": [gpu],
    }
    envelope = make_envelope("host.sampled", data)
    parsed = parse_envelope(envelope.to_json())

    for got in (envelope.data, parsed.data):
        assert got["cpu_percent"] is None
        assert got["load_1m"] is None
        for key, value in got["gpus"][0].items():
            if key not in ("uuid", "index"):
                assert value is None, key
    discovered = {**EXAMPLES["gpu.discovered"], "memory_total_mib": None}
    assert make_envelope("gpu.discovered", discovered).data["memory_total_mib"] is None


def test_omitted_metrics_are_not_filled_with_zero() -> None:
    data = {"host": "gpu-01", "sampled_at": NOW, "gpus": [{"uuid": "GPU-0", "index": 0}]}
    parsed = parse_envelope(make_envelope("host.sampled", data).to_json())
    assert "cpu_percent" not in parsed.data or parsed.data["cpu_percent"] is None
    gpu = parsed.data["gpus"][0]
    assert gpu.get("utilization_gpu_percent") is None


def test_make_envelope_refuses_values_that_are_not_wire_form() -> None:
    data = {**EXAMPLES["host.unreachable"], "since": datetime(2024, 5, 1, 12, tzinfo=UTC)}
    with pytest.raises(ContractError):
        make_envelope("host.unreachable", data).to_json()


@pytest.mark.parametrize(
    ("type_name", "changes"),
    [
        ("gpu.discovered", {"index": "3"}),
        ("gpu.discovered", {"index": 3.5}),
        ("host.sampled", {"cpu_percent": "12"}),
    ],
)
def test_make_envelope_refuses_numbers_in_the_wrong_json_type(
    type_name: str, changes: dict[str, Any]
) -> None:
    with pytest.raises(ContractError):
        make_envelope(type_name, {**EXAMPLES[type_name], **changes})


# --- parse_envelope: the consumer's side ------------------------------------------------------


@pytest.mark.parametrize("type_name", TYPE_NAMES)
def test_round_trip_through_json(type_name: str) -> None:
    envelope = make_envelope(type_name, EXAMPLES[type_name])
    body = envelope.to_json()
    assert isinstance(body, bytes)
    parsed = parse_envelope(body)
    assert parsed == envelope
    assert parse_envelope(body.decode()) == envelope
    assert parse_envelope(json.loads(body)) == envelope


def test_wire_form_is_the_documented_envelope() -> None:
    raw = json.loads(make_envelope("host.unreachable", EXAMPLES["host.unreachable"]).to_json())
    assert set(raw) == {"id", "type", "version", "occurred_at", "source", "data"}
    assert raw["type"] == "host.unreachable"
    assert raw["version"] == 1
    assert raw["source"] == "monitor"


def test_parse_accepts_unknown_extra_fields() -> None:
    """A compatible change (new optional field) keeps the version: old consumers ignore it."""
    data = {**EXAMPLES["host.unreachable"], "new_optional_field": "x"}
    parsed = parse_envelope(_wire("host.unreachable", data=data, trace_id="abc"))
    assert parsed.type == "host.unreachable"
    assert parsed.data["host"] == "gpu-01"


@pytest.mark.parametrize(
    ("type_name", "nested"), [("host.sampled", "gpus"), ("processes.observed", "processes")]
)
def test_parse_accepts_unknown_fields_in_nested_objects(type_name: str, nested: str) -> None:
    data = dict(EXAMPLES[type_name])
    data[nested] = [{**data[nested][0], "new_optional_field": 1}]
    parsed = parse_envelope(_wire(type_name, data=data))
    assert parsed.type == type_name


@pytest.mark.parametrize("version", [2, 99, 0])
def test_parse_rejects_unknown_version(version: int) -> None:
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", version=version))


@pytest.mark.parametrize("version", ["1", True, 1.0, None])
def test_parse_rejects_a_version_that_is_not_an_integer(version: Any) -> None:
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", version=version))


def test_parse_rejects_unknown_type() -> None:
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", type="host.exploded"))
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", type=7))


@pytest.mark.parametrize("body", [b"[1, 2]", b'"envelope"', b"3", b"null", "[]"])
def test_parse_rejects_what_is_not_an_object(body: bytes | str) -> None:
    with pytest.raises(ContractError):
        parse_envelope(body)


@pytest.mark.parametrize("body", [b"", b"{", b"\xff\xfe\x00", b"not json"])
def test_parse_rejects_what_is_not_json(body: bytes) -> None:
    with pytest.raises(ContractError):
        parse_envelope(body)


@pytest.mark.parametrize("missing", ["id", "type", "version", "occurred_at", "source", "data"])
def test_parse_rejects_a_missing_envelope_key(missing: str) -> None:
    raw = _wire("host.unreachable")
    del raw[missing]
    with pytest.raises(ContractError) as err:
        parse_envelope(json.dumps(raw))
    assert err.value.details == {"missing": [missing]}


def test_parse_rejects_data_off_schema() -> None:
    with pytest.raises(ContractError) as err:
        parse_envelope(_wire("host.unreachable", data={"host": "gpu-01", "since": NOW}))
    assert "reason" in err.value.details["errors"]
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", data="gpu-01"))
    with pytest.raises(ContractError):
        parse_envelope(_wire("host.unreachable", data=None))


def test_envelope_is_immutable() -> None:
    envelope = make_envelope("host.unreachable", EXAMPLES["host.unreachable"])
    with pytest.raises(AttributeError):
        envelope.type = "host.recovered"  # type: ignore[misc]
    assert isinstance(envelope, Envelope)
