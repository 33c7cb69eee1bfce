"""What a container deployment needs from the `warden` command: the compose `.env` with its
random secrets (`warden init --compose`) and Warden's SSH key (`warden key --generate`, and
`warden init` in the data directory when no key is configured).

The `.env` names match docker-compose.yml and docker/env.example; compose reads the file, so
no secret is ever written into the compose file itself.
"""

from __future__ import annotations

import os
import secrets
import sys
from pathlib import Path

import asyncssh

from services.shared.config import Settings, data_dir_key_file

# Secrets are URL-safe: the RabbitMQ and PostgreSQL passwords go into connection URLs.
COMPOSE_SECRETS = (
    "WARDEN_JWT_SECRET",
    "RABBITMQ_PASSWORD",
    "POSTGRES_PASSWORD",
    "INFLUXDB_PASSWORD",
    "INFLUXDB_TOKEN",
    "GRAFANA_PASSWORD",
)
COMPOSE_SETTINGS = {
    "INFLUXDB_USERNAME": "admin",
    "INFLUXDB_ORG": "warden",
    "INFLUXDB_BUCKET": "warden",
}

ENV_HEADER = """\
# Secrets and settings for docker-compose.yml, written by `warden init --compose`.
# Keep this file private (mode 600) and out of version control; docker/env.example lists every
# variable. The passwords take effect when their volume is first created: changing one here
# later does not change it in RabbitMQ or PostgreSQL.
"""


def read_env_file(path: Path) -> dict[str, str]:
    """The NAME=value pairs of a compose .env file (comments and blank lines skipped)."""
    values: dict[str, str] = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.partition("=")
        values[name.strip()] = value.strip().strip("'\"")
    return values


def write_compose_env(path: Path) -> list[str]:
    """Write the compose .env at `path`, or complete an existing one: values already there are
    kept (a password changed now would no longer match its volume); missing ones are appended,
    secrets random. Returns the names it added."""
    existing = read_env_file(path) if path.exists() else {}
    wanted = {name: secrets.token_urlsafe(32) for name in COMPOSE_SECRETS}
    wanted.update(COMPOSE_SETTINGS)
    added = [name for name in wanted if not existing.get(name)]
    if not added:
        return []
    lines = [] if existing else [ENV_HEADER]
    lines += [f"{name}={wanted[name]}\n" for name in added]
    # Created private: the file holds every password of the deployment.
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    with os.fdopen(descriptor, "a") as env:
        if existing and not path.read_text().endswith("\n"):
            env.write("\n")
        env.writelines(lines)
    path.chmod(0o600)
    return added


def ensure_ssh_key(path: Path) -> bool:
    """Make an ed25519 key pair at `path` (and `path`.pub) unless one is there; True if made."""
    if path.exists():
        return False
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = asyncssh.generate_private_key("ssh-ed25519", comment="warden")
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # never readable
    with os.fdopen(descriptor, "wb") as private:
        private.write(key.export_private_key())
    key.write_public_key(str(path) + ".pub")
    return True


def init_compose(path: Path) -> int:
    """`warden init --compose`: write or complete the .env, and say what comes next."""
    existed = path.exists()
    added = write_compose_env(path)
    if not existed:
        print(f"wrote {path} with random secrets: {', '.join(added)}")
    elif added:
        print(f"{path} exists; kept its values and added {', '.join(added)}")
    else:
        print(f"{path} exists and has every value; keeping it")
    print(
        "next: `docker compose build && docker compose up -d` (or podman-compose), then the "
        "first admin:\n      docker compose exec gateway warden user add NAME --email E --admin"
    )
    return 0


def init_key(settings: Settings) -> None:
    """`warden init`: with no key for logging in as users configured (`ssh.key_file`, or a
    host's key_file that users already authorized), make Warden's key in the data directory;
    `load_settings` then uses it for `ssh.key_file`."""
    if settings.ssh.key_file or any(host.key_file for host in settings.hosts):
        return
    path = data_dir_key_file(settings.storage.data_dir)
    if ensure_ssh_key(path):
        print(f"made Warden's SSH key {path} (`warden key` shows the line users add)")


def generate_key(settings: Settings) -> None:
    """`warden key --generate`: make the key at ssh.key_file (empty: the data directory's)
    unless it is there."""
    path = Path(settings.ssh.key_file).expanduser() if settings.ssh.key_file else None
    path = path or data_dir_key_file(settings.storage.data_dir)
    if ensure_ssh_key(path):
        print(f"made the SSH key {path}", file=sys.stderr)


__all__ = [
    "COMPOSE_SECRETS",
    "ensure_ssh_key",
    "generate_key",
    "init_compose",
    "init_key",
    "read_env_file",
    "write_compose_env",
]
