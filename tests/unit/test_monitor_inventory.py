"""The inventory's rules, pure: seeding from [[hosts]] (config rows follow the config, API edits
and tombstones stay), the diff that starts/stops/restarts poll loops, applying API fields, the
host-key status and fingerprint; and the poll loops added and removed at runtime."""

from __future__ import annotations

import base64
import hashlib

import asyncssh
import pytest

from services.monitor.hosts.host_check import key_status
from services.monitor.hosts.inventory import (
    API,
    CONFIG,
    LOCAL,
    StoredHost,
    active,
    diff_hosts,
    host_from,
    normal_key_line,
    problems,
    seed_plan,
    seeded,
)
from services.monitor.monitor import Monitor
from services.monitor.readers import FakeReader
from services.shared.config import HostConfig
from services.shared.remote.ssh import key_line
from tests.support import polling
from tests.unit.test_monitor_loop import Recorder, healthy


def host(name: str, **fields: object) -> HostConfig:
    return HostConfig(name=name, address=f"{name}.lab", user="warden", **fields)  # type: ignore[arg-type]


def test_a_configured_host_the_database_does_not_know_is_inserted() -> None:
    plan = seed_plan([], [host("a"), host("b")])
    assert [row.name for row in plan.insert] == ["a", "b"]
    assert all(row.source == CONFIG for row in plan.insert)
    assert not plan.update and not plan.delete


def test_a_config_row_follows_the_config_and_goes_with_its_table() -> None:
    stored = [StoredHost(host("a"), CONFIG), StoredHost(host("b"), CONFIG)]
    plan = seed_plan(stored, [host("a", port=2222)])
    assert plan.update == [StoredHost(host("a", port=2222), CONFIG)]
    assert plan.delete == ["b"]
    assert seeded(stored, plan) == [StoredHost(host("a", port=2222), CONFIG)]


def test_api_edits_and_tombstones_are_left_alone() -> None:
    stored = [
        StoredHost(host("edited", labels=("mine",)), API),
        StoredHost(host("removed"), CONFIG, removed=True),
        StoredHost(host("added"), API),
    ]
    plan = seed_plan(stored, [host("edited"), host("removed")])
    assert not plan
    assert seeded(stored, plan) == sorted(stored, key=lambda row: row.name)
    assert [h.name for h in active(stored, None)] == ["added", "edited"]


def test_this_machine_joins_the_active_hosts_unless_one_has_its_name() -> None:
    local = HostConfig(name="head", probe="nvml")
    hosts = active([StoredHost(host("a"), CONFIG)], local)
    assert [(h.name, h.source) for h in hosts] == [("a", CONFIG), ("head", LOCAL)]
    assert hosts[1].record()["host_key"] is None and hosts[1].record()["probe"] == "nvml"
    taken = active([StoredHost(host("head"), API)], local)
    assert [(h.name, h.source) for h in taken] == [("head", API)]


def test_the_diff_says_which_loops_start_stop_restart_or_only_relabel() -> None:
    running = {"a": host("a"), "b": host("b"), "c": host("c"), "d": host("d")}
    wanted = [host("a"), host("b", port=2200), host("c", labels=("x",)), host("e")]
    diff = diff_hosts(running, wanted)
    assert [h.name for h in diff.added] == ["e"]
    assert diff.removed == ["d"]
    assert [h.name for h in diff.changed] == ["b"]
    assert [h.name for h in diff.relabeled] == ["c"]


def test_api_fields_apply_over_a_host() -> None:
    base = host("a", labels=("x",))
    changed = host_from({"port": 2200, "labels": ["y", "y", "z"], "host_key": None}, base)
    assert changed.port == 2200 and changed.labels == ("y", "z") and changed.host_key == ""
    assert changed.address == "a.lab"
    new = host_from({"name": "n", "address": " n.lab ", "user": "w"})
    assert new.address == "n.lab" and new.port == 22 and new.probe == "ssh"
    assert problems(HostConfig(name="x")) == {
        "address": 'required when probe is "ssh"',
        "user": 'required when probe is "ssh"',
    }
    assert problems(HostConfig(name="x", probe="nvml")) == {}


@pytest.mark.parametrize(
    "line",
    [
        "ssh-ed25519 AAAAC3Nza key-comment",
        "[127.0.0.1]:2222 ssh-ed25519 AAAAC3Nza",
        "  ssh-ed25519   AAAAC3Nza  ",
    ],
)
def test_a_key_line_is_kept_without_pattern_or_comment(line: str) -> None:
    assert normal_key_line(line) == "ssh-ed25519 AAAAC3Nza"


def test_a_host_key_is_trusted_new_or_changed() -> None:
    key = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    other = asyncssh.generate_private_key("ssh-ed25519").convert_to_public()
    assert key_status(key, [key]) == "trusted"
    assert key_status(key, [other, key]) == "trusted"
    assert key_status(key, []) == "new"
    assert key_status(key, [other]) == "changed"
    assert key_line(key).startswith("ssh-ed25519 AAAA") and len(key_line(key).split()) == 2
    # As `ssh-keygen -lf` shows it: SHA256 and unpadded base64 of the key's blob.
    digest = hashlib.sha256(key.public_data).digest()
    expected = "SHA256:" + base64.b64encode(digest).decode().rstrip("=")
    assert key.get_fingerprint("sha256") == expected


async def test_hosts_are_added_relabeled_and_removed_while_polling() -> None:
    published = Recorder()
    monitor = Monitor([FakeReader("a", healthy)], published, interval_s=0.05, poll_deadline_s=0.04)
    await monitor.start()
    try:
        added = FakeReader("b", healthy)
        await monitor.add(added, ["lab"])
        await polling.until(lambda: published.of("host.sampled", "b"), "b sampled", timeout=10)
        assert monitor.snapshot("b")["hosts"][0]["labels"] == ["lab"]
        monitor.relabel("b", ["other"])
        assert monitor.snapshot("b")["hosts"][0]["labels"] == ["other"]

        replacement = FakeReader("b", healthy)
        await monitor.add(replacement)
        await polling.until(lambda: replacement.reads >= 2, "the new reader polled", timeout=10)
        reads = added.reads  # the first reader stopped when it was replaced

        await monitor.remove("b")
        last = replacement.reads
        assert [h["name"] for h in monitor.snapshot()["hosts"]] == ["a"]
        after = len(published.of("host.sampled", "a"))
        await polling.until(
            lambda: len(published.of("host.sampled", "a")) >= after + 3, "a polled on", timeout=10
        )
        assert added.reads == reads and replacement.reads == last
    finally:
        await monitor.stop()
