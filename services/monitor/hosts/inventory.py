"""Which hosts the monitor watches, as pure rules: the inventory its database holds (seeded from
`[[hosts]]`, changed through the API), plus this machine through NVML.

Seeding (`seed_plan`): a configured host the database does not know is inserted (source
"config"); a row seeded from the config and never edited through the API follows the config
(changed with it, deleted when its table goes); a host edited through the API (source "api")
is left alone; one removed through the API stays removed (a tombstone row), until it is added
again. `diff_hosts` says which poll loops to start, stop or restart for a new host list.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.shared.config import HostConfig, Settings

CONFIG = "config"
API = "api"
LOCAL = "local"


def local_host_name(configured: str) -> str:
    return configured or os.uname().nodename


def monitored_hosts(settings: Settings, *, local_has_nvml: bool) -> list[HostConfig]:
    """The configured hosts, and this machine when `monitor.local_nvml` says so."""
    hosts = list(settings.hosts)
    local = local_host(settings, hosts, local_has_nvml=local_has_nvml)
    return [*hosts, local] if local is not None else hosts


def local_host(
    settings: Settings, hosts: Sequence[HostConfig], *, local_has_nvml: bool
) -> HostConfig | None:
    """This machine through NVML, when `monitor.local_nvml` wants it and no host is one already.

    `auto` adds this machine when NVML works here (it has an NVIDIA driver); `on` adds it
    anyway (it then shows "no GPU" if NVML is missing); `off` never does.
    """
    wanted = settings.monitor.local_nvml == "on" or (
        settings.monitor.local_nvml == "auto" and local_has_nvml
    )
    if not wanted or any(host.probe == "nvml" for host in hosts):
        return None
    return HostConfig(name=local_host_name(settings.monitor.local_name), probe="nvml")


@dataclass(frozen=True)
class StoredHost:
    """A row of the inventory table: the host, where it came from, and whether it was removed
    through the API (a tombstone: not polled, not seeded again)."""

    host: HostConfig
    source: str  # CONFIG or API (LOCAL is never stored)
    removed: bool = False

    @property
    def name(self) -> str:
        return self.host.name


@dataclass(frozen=True)
class SeedPlan:
    insert: list[StoredHost] = field(default_factory=list)
    update: list[StoredHost] = field(default_factory=list)
    delete: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.insert or self.update or self.delete)


def seed_plan(stored: Iterable[StoredHost], configured: Sequence[HostConfig]) -> SeedPlan:
    """What seeding the inventory from `[[hosts]]` changes in the stored rows."""
    rows = {row.name: row for row in stored}
    plan = SeedPlan()
    for host in configured:
        row = rows.get(host.name)
        if row is None:
            plan.insert.append(StoredHost(host, CONFIG))
        elif row.source == CONFIG and not row.removed and row.host != host:
            plan.update.append(StoredHost(host, CONFIG))
    wanted = {host.name for host in configured}
    for row in rows.values():
        # A config-seeded host whose table went is gone; a tombstone stays (it says "the
        # admin removed it", whatever the config says later).
        if row.source == CONFIG and not row.removed and row.name not in wanted:
            plan.delete.append(row.name)
    return plan


def seeded(stored: Iterable[StoredHost], plan: SeedPlan) -> list[StoredHost]:
    """The rows after `plan` (what the database holds once it is applied)."""
    rows = {row.name: row for row in stored}
    for row in [*plan.insert, *plan.update]:
        rows[row.name] = row
    for name in plan.delete:
        rows.pop(name, None)
    return sorted(rows.values(), key=lambda row: row.name)


@dataclass(frozen=True)
class InventoryHost:
    """A host the monitor watches, with its source (config, api or local)."""

    host: HostConfig
    source: str

    @property
    def name(self) -> str:
        return self.host.name

    def record(self) -> dict[str, Any]:
        """As the contracts' HostRecord says it."""
        host = self.host
        return {
            "name": host.name,
            "address": host.address,
            "port": host.port,
            "user": host.user,
            "key_file": host.key_file,
            "probe": host.probe,
            "labels": list(host.labels),
            "host_key": host.host_key or None,
            "source": self.source,
        }


def active(stored: Iterable[StoredHost], local: HostConfig | None) -> list[InventoryHost]:
    """The hosts to poll: every stored row not removed, and this machine."""
    hosts = [InventoryHost(row.host, row.source) for row in stored if not row.removed]
    if local is not None and all(h.name != local.name for h in hosts):
        hosts.append(InventoryHost(local, LOCAL))
    return sorted(hosts, key=lambda h: h.name)


# --- changes through the API -------------------------------------------------------------------

EDITABLE = ("address", "port", "user", "key_file", "probe", "labels", "host_key")


def host_from(fields: Mapping[str, Any], base: HostConfig | None = None) -> HostConfig:
    """A host with `fields` (as the API takes them) over `base` (or the defaults)."""
    changes: dict[str, Any] = {}
    for key in EDITABLE:
        if key not in fields:
            continue
        value = fields[key]
        if key == "labels":
            value = tuple(dict.fromkeys(value))  # in order, each once
        elif key == "host_key":
            value = normal_key_line(value or "")
        elif isinstance(value, str):
            value = value.strip()
        changes[key] = value
    if base is None:
        return HostConfig(name=fields["name"], **changes)
    return dataclasses.replace(base, **changes)


def normal_key_line(line: str) -> str:
    """`type base64` of a public key line: without a comment or a known_hosts pattern."""
    words = line.split()
    for i, word in enumerate(words[:-1]):
        if word.startswith(("ssh-", "ecdsa-", "sk-")):
            return f"{word} {words[i + 1]}"
    return " ".join(words[:2])


def problems(host: HostConfig) -> dict[str, str]:
    """What makes `host` unpollable, by field (empty: fine)."""
    found: dict[str, str] = {}
    if host.probe == "ssh":
        if not host.address:
            found["address"] = 'required when probe is "ssh"'
        if not host.user:
            found["user"] = 'required when probe is "ssh"'
    return found


# --- poll loops for a new host list ------------------------------------------------------------


@dataclass(frozen=True)
class HostsDiff:
    added: list[HostConfig] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    # Read differently now (address, user, key, ...): the loop restarts with a new reader.
    changed: list[HostConfig] = field(default_factory=list)
    # Only the labels differ: nothing to restart.
    relabeled: list[HostConfig] = field(default_factory=list)


def diff_hosts(running: Mapping[str, HostConfig], wanted: Sequence[HostConfig]) -> HostsDiff:
    """How to go from the hosts polled now to `wanted`."""
    diff = HostsDiff()
    names = {host.name for host in wanted}
    for host in wanted:
        old = running.get(host.name)
        if old is None:
            diff.added.append(host)
        elif dataclasses.replace(old, labels=()) != dataclasses.replace(host, labels=()):
            diff.changed.append(host)
        elif old.labels != host.labels:
            diff.relabeled.append(host)
    diff.removed.extend(name for name in running if name not in names)
    return diff
