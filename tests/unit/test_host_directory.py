"""The live host list of jobs, violations and reservations (`HostDirectory`), without a bus: a
record becomes a HostConfig, events and whole lists change it, a removed host keeps its last
record for the work still running there; labels pick violation steps; a removed host's GPUs
take no new booking."""

from __future__ import annotations

from typing import Any

import pytest

from services.reservations.rules.domain import Gpu, Refusal
from services.reservations.rules.refusals import refusal_error, removed_host_refusals
from services.shared.cluster.host_directory import HostDirectory, host_config
from services.shared.config import HostConfig, ViolationSettings
from services.shared.config.escalation import parse_step
from services.shared.config.settings import StepOverride
from services.shared.contracts import make_envelope
from services.shared.errors import ValidationFailed
from services.shared.http_errors import STATUS_BY_CODE


def record(name: str, **fields: Any) -> dict[str, Any]:
    return {
        "name": name,
        "address": f"{name}.lab.example",
        "port": 22,
        "user": "warden",
        "key_file": "",
        "probe": "ssh",
        "labels": [],
        "host_key": None,
        "source": "api",
        **fields,
    }


def seeded() -> HostDirectory:
    return HostDirectory([HostConfig(name="dgx1", address="dgx1.lab.example", user="warden")])


def test_a_host_record_becomes_the_host_config_services_log_in_with() -> None:
    key = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIG1vY2sta2V5LWZvci10ZXN0cy1vbmx5"
    host = host_config(record("a1", port=2222, labels=["a100", "lab-b"], host_key=key))
    assert host == HostConfig(
        name="a1",
        address="a1.lab.example",
        port=2222,
        user="warden",
        probe="ssh",
        labels=("a100", "lab-b"),
        host_key=key,
    )
    assert host_config(record("a2")).host_key == ""  # null: [ssh] known_hosts decides


def test_events_add_change_and_remove_hosts_and_a_redelivery_changes_nothing() -> None:
    hosts = seeded()
    changes: list[frozenset[str]] = []
    hosts.listeners.append(changes.append)
    added = {"host": record("a1", labels=["a100"])}
    make_envelope("host.added", added, source="monitor")  # what the monitor publishes
    hosts.apply("host.added", added)
    hosts.apply("host.added", added)
    assert sorted(hosts) == ["a1", "dgx1"] and hosts["a1"].labels == ("a100",)
    hosts.apply("host.updated", {"host": record("a1", labels=["h100"])})
    assert hosts.labels("a1") == ("h100",)
    hosts.apply("host.removed", {"host": "a1"})
    hosts.apply("host.removed", {"host": "a1"})
    assert changes == [frozenset({"a1"})] * 3


def test_an_event_overtaken_by_a_newer_one_of_its_host_changes_nothing() -> None:
    hosts = seeded()
    hosts.apply("host.removed", {"host": "dgx1"}, "2026-11-24T10:00:02+00:00")
    # Its update, sent before the removal, comes late on its own queue.
    hosts.apply("host.updated", {"host": record("dgx1")}, "2026-11-24T10:00:01+00:00")
    assert "dgx1" not in hosts
    hosts.apply("host.added", {"host": record("dgx1")}, "2026-11-24T10:00:03+00:00")
    assert "dgx1" in hosts


def test_a_removed_host_is_gone_for_new_work_but_its_last_record_stays_known() -> None:
    hosts = seeded()
    hosts.apply("host.removed", {"host": "dgx1"})
    assert "dgx1" not in hosts and hosts.get("dgx1") is None and len(hosts) == 0
    assert hosts.was_removed("dgx1") and not hosts.offers("dgx1")
    known = hosts.known("dgx1")
    assert known is not None and known.address == "dgx1.lab.example"
    assert hosts.known("never") is None and not hosts.was_removed("never")
    hosts.apply("host.added", {"host": record("dgx1")})
    assert "dgx1" in hosts and not hosts.was_removed("dgx1") and hosts.offers("dgx1")


def test_the_monitors_list_replaces_the_seed_and_what_it_lacks_counts_as_removed() -> None:
    hosts = seeded()
    assert hosts.offers("added-through-the-api")  # not listed yet: the seed may lack it
    hosts.replace([host_config(record("a1"))])
    hosts.listed = True
    assert sorted(hosts) == ["a1"] and hosts.was_removed("dgx1")
    assert not hosts.offers("added-through-the-api") and not hosts.offers("dgx1")


def test_a_list_does_not_undo_an_event_that_came_while_it_was_asked_for() -> None:
    hosts = seeded()
    hosts.apply("host.added", {"host": record("a1", labels=["new"])})
    # The answer was made before a1 was added and before dgx1's labels changed.
    hosts.replace([HostConfig(name="dgx1", address="x", user="u")], keep={"a1"})
    assert sorted(hosts) == ["a1", "dgx1"] and hosts.labels("a1") == ("new",)


def _override(hosts: tuple[str, ...] = (), labels: tuple[str, ...] = ()) -> StepOverride:
    return StepOverride(hosts=hosts, labels=labels, steps=(parse_step("0s terminal offender"),))


@pytest.mark.parametrize(
    ("host", "labels", "expected"),
    [
        ("a1", ("a100",), "labels"),
        ("a1", ("lab-b", "a100"), "labels"),
        ("dgx3", (), "names"),
        ("dgx3", ("a100",), "names"),  # the first override that matches applies
        ("a1", ("h100",), "default"),
        ("a1", (), "default"),
    ],
)
def test_an_override_matches_a_host_by_name_pattern_or_by_any_of_its_labels(
    host: str, labels: tuple[str, ...], expected: str
) -> None:
    by_name = _override(hosts=("dgx*",))
    by_label = StepOverride(labels=("a100",), steps=(parse_step("0s kill"),))
    settings = ViolationSettings(overrides=(by_name, by_label))
    found = settings.steps_for(host, labels)
    want = {"names": by_name.steps, "labels": by_label.steps, "default": settings.steps}
    assert found == want[expected]


def test_a_gpu_of_a_removed_host_is_refused_with_the_reason() -> None:
    gpus = [Gpu("GPU-a", "gone", 1), Gpu("GPU-b", "here", 0), Gpu("GPU-c", "gone", 0)]
    refusals = removed_host_refusals(gpus, lambda host: host == "here")
    assert [(r.code, r.details["gpu"]) for r in refusals] == [
        ("not_offered", "GPU-c"),
        ("not_offered", "GPU-a"),
    ]
    assert "GPU gone:0 is not offered: gone was removed" in refusals[0].message
    assert removed_host_refusals(gpus, lambda _host: True) == []
    # Well-formed but not allowed: 422 with the reasons, before a conflict on another GPU.
    error = refusal_error([*refusals, Refusal("conflict", "GPU-b is taken")])
    assert isinstance(error, ValidationFailed)
    assert STATUS_BY_CODE[error.code] == 422
    assert error.message.startswith("GPU gone:0 is not offered: gone was removed")
    assert [r["gpu"] for r in error.details["reasons"][:2]] == ["GPU-c", "GPU-a"]
