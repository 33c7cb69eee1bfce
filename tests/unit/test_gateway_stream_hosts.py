"""What of a host.* event each caller sees on the live stream (pure): admins the whole record,
everyone else a host's name and labels only (not how Warden reaches it)."""

from __future__ import annotations

from services.gateway.auth import Caller
from services.gateway.stream import Event, visible_data

RECORD = {
    "name": "dgx1",
    "address": "10.0.0.7",
    "port": 2222,
    "user": "warden",
    "key_file": "/etc/warden/id_ed25519",
    "probe": "ssh",
    "labels": ["a100"],
    "host_key": "ssh-ed25519 AAAAC3Nza",
    "source": "api",
}


def event(event_type: str, data: dict[str, object]) -> Event:
    return Event(1, "e-1", "hosts", event_type, "2026-11-24T20:00:00+00:00", data)


def test_admins_see_the_whole_record_and_others_its_name_and_labels() -> None:
    admin, alice = Caller("root", True), Caller("alice", False)
    for event_type in ("host.added", "host.updated"):
        changed = event(event_type, {"host": RECORD})
        assert visible_data(admin, changed) == {"host": RECORD}
        assert visible_data(alice, changed) == {"host": {"name": "dgx1", "labels": ["a100"]}}
    removed = event("host.removed", {"host": "dgx1"})
    assert visible_data(alice, removed) == {"host": "dgx1"}
    sampled = event("host.sampled", {"host": "dgx1", "cpu_percent": 3.0})
    assert visible_data(alice, sampled) == sampled.data
