"""A simulated fleet (services/sim) served over real SSH on loopback, with what Warden needs to
log in to it: a client key the hosts accept and a known_hosts file that trusts them.

    async with served_fleet(SimFleet(2, 4, seed=3, churn=False), tmp_path) as served:
        write_config(tmp_path / "warden.toml", **served.config())
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh

from services.shared.config import HostConfig, SshSettings
from services.sim.model import SimFleet
from services.sim.server import SimServer


@dataclass
class ServedFleet:
    fleet: SimFleet
    server: SimServer
    key_file: Path  # Warden's private key: every host accepts it, for any user
    known_hosts: Path  # every host's key

    def hosts(self, user: str = "warden") -> list[dict[str, Any]]:
        """The `[[hosts]]` entries: each host, logged in to as `user` with `key_file`."""
        return self.server.hosts_config(user, self.key_file)

    def host(self, name: str, user: str = "warden") -> HostConfig:
        [entry] = [host for host in self.hosts(user) if host["name"] == name]
        return HostConfig(**entry)

    def ssh_settings(self, **changes: Any) -> SshSettings:
        return SshSettings(
            known_hosts=str(self.known_hosts), key_file=str(self.key_file), **changes
        )

    def config(self, user: str = "warden") -> dict[str, Any]:
        """The config sections that point Warden at this fleet: `[ssh]` and `[[hosts]]`."""
        ssh = {"known_hosts": str(self.known_hosts), "key_file": str(self.key_file)}
        return {"ssh": ssh, "hosts": self.hosts(user)}


@contextlib.asynccontextmanager
async def served_fleet(fleet: SimFleet, directory: Path) -> AsyncIterator[ServedFleet]:
    """`fleet` served over SSH until the end of the block; the key and known_hosts files go
    into `directory`."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = directory / "warden_key"
    key.write_private_key(str(key_file))
    key_file.chmod(0o600)
    async with SimServer(fleet, authorized_keys=[key.convert_to_public()]) as server:
        known_hosts = directory / "known_hosts"
        known_hosts.write_text("\n".join(server.known_hosts_lines()) + "\n")
        yield ServedFleet(fleet, server, key_file, known_hosts)
