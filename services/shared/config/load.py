"""Loading: one TOML file, `WARDEN_<SECTION>_<KEY>` environment overrides, validation.

Every problem is collected and reported at once, each under its key (`bus.prefetch`). Secrets
that are missing or placeholders are refused unless `dev` is set.
"""

from __future__ import annotations

import dataclasses
import os
import secrets
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from marshmallow import Schema, ValidationError

from services.shared.config.declare import keys, sections
from services.shared.config.replicas import ReplicaSettings
from services.shared.config.schema import Rule, schema_for
from services.shared.config.settings import (
    MIN_SECRET_LENGTH,
    AuthSettings,
    HostConfig,
    JobSettings,
    MonitorSettings,
    ReservationSettings,
    Settings,
    SshSettings,
    StepOverride,
    ViolationSettings,
    default_config_path,
    default_data_dir,
)
from services.shared.errors import ConfigError

ENV_PREFIX = "WARDEN_"
PLACEHOLDER_SECRETS = {
    "change-me",
    "changeme",
    "secret",
    "placeholder",
    "xxx",
    "todo",
    "jwt-secret",
}

# --- rules across keys -----------------------------------------------------------------------


def _influx_keys(values: dict[str, Any]) -> None:
    if values["tsdb"] == "influx":
        for key in ("influx_url", "influx_org", "influx_token"):
            if not values[key]:
                raise ValidationError('required when tsdb = "influx"', key)


def _durations(values: dict[str, Any]) -> None:
    if values["max_duration_h"] * 60 < values["min_duration_min"]:
        raise ValidationError("must be at least min_duration_min", "max_duration_h")


def _smtp_login(values: dict[str, Any]) -> None:
    if values["smtp_password"] and not values["smtp_username"]:
        raise ValidationError(
            "set smtp_username too (a password alone logs in nobody)", "smtp_password"
        )


def _steps_in_order(values: dict[str, Any]) -> None:
    delays = [step.after_s for step in values["steps"]]
    if delays != sorted(delays):
        raise ValidationError("steps must be listed in order of their delays", "steps")


def _hosts_or_labels(values: dict[str, Any]) -> None:
    if not values["hosts"] and not values["labels"]:
        raise ValidationError("give hosts (name patterns) or labels, or both", "hosts")


def _ports(values: dict[str, Any]) -> None:
    if values["port_max"] < values["port_min"]:
        raise ValidationError("must be at least port_min", "port_max")


def _one_line_state_dir(values: dict[str, Any]) -> None:
    if "\n" in values["state_dir"] or "\0" in values["state_dir"]:
        raise ValidationError("must be one line", "state_dir")


def _ssh_login(values: dict[str, Any]) -> None:
    if values["probe"] == "ssh":
        for key in ("address", "user"):
            if not values[key]:
                raise ValidationError("required for a host polled over SSH", key)


def _dead_after_beats(values: dict[str, Any]) -> None:
    if values["dead_after_s"] <= values["heartbeat_s"]:
        raise ValidationError("must be longer than heartbeat_s", "dead_after_s")


RULES: dict[type, tuple[Rule, ...]] = {
    ReplicaSettings: (_dead_after_beats,),
    MonitorSettings: (_influx_keys,),
    ReservationSettings: (_durations,),
    ViolationSettings: (_smtp_login, _steps_in_order),
    StepOverride: (_steps_in_order, _hosts_or_labels),
    JobSettings: (_ports, _one_line_state_dir),
    HostConfig: (_ssh_login,),
}
SECTIONS: dict[str, type[Schema]] = {
    name: schema_for(cls, RULES) for name, cls in sections(Settings).items()
}
HOST_SCHEMA = schema_for(HostConfig, RULES)


# Keys that moved to another section: an old config names them, and is told where they went.
MOVED_KEYS = {
    ("monitor", "known_hosts"): "ssh.known_hosts",
    ("monitor", "accept_new_host_keys"): "ssh.accept_new_host_keys",
    ("monitor", "connect_timeout_s"): "ssh.connect_timeout_s",
    ("monitor", "keepalive_s"): "ssh.keepalive_s",
    ("jobs", "ssh_key_file"): "ssh.key_file",
    ("violations", "ssh_key_file"): "ssh.key_file",
}


def _moved_keys(
    raw: Mapping[str, Any], environ: Mapping[str, str], problems: dict[str, str]
) -> dict[str, Any]:
    """`raw` without the moved keys, each reported in `problems` with where it lives now."""
    kept = dict(raw)
    for (section, key), new in MOVED_KEYS.items():
        values = raw.get(section)
        new_section, new_key = new.split(".")
        if isinstance(values, dict) and key in values:
            problems[f"{section}.{key}"] = f"moved: set {new_key} in [{new_section}] instead"
            kept[section] = {k: v for k, v in kept[section].items() if k != key}
        old_env = f"{ENV_PREFIX}{section}_{key}".upper()
        if old_env in environ:
            new_env = f"{ENV_PREFIX}{new_section}_{new_key}".upper()
            problems[f"{section}.{key}"] = f"moved: set {new_env} instead of {old_env}"
    return kept


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """`WARDEN_BUS_AMQP_URL=...` → {"bus": {"amqp_url": "..."}}; lists are comma-separated."""
    found: dict[str, dict[str, Any]] = {}
    for section, cls in sections(Settings).items():
        found_here = _env_values(environ, f"{ENV_PREFIX}{section}", cls)
        if found_here:
            found[section] = found_here
    return found


def _env_values(environ: Mapping[str, str], prefix: str, cls: type) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for key in keys(cls):
        if key.section is not None:  # `[auth.ldap]`: WARDEN_AUTH_LDAP_<KEY>, lists excepted
            nested = _env_values(environ, f"{prefix}_{key.name}", key.section)
            nested = {name: value for name, value in nested.items() if isinstance(value, str)}
            if nested:
                found[key.name] = nested
            continue
        value = environ.get(f"{prefix}_{key.name}".upper())
        if value is None or key.table is not None:  # tables come from the file only
            continue
        if key.item is not None:
            items = (item.strip() for item in value.split(","))
            found[key.name] = [item for item in items if item]
        else:
            found[key.name] = value
    return found


def _merged(values: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The file's values with the environment's over them, nested tables key by key."""
    merged = dict(values)
    for name, value in overrides.items():
        if isinstance(value, dict) and isinstance(merged.get(name), dict):
            merged[name] = {**merged[name], **value}
        else:
            merged[name] = value
    return merged


def _flatten(errors: Any, prefix: str) -> dict[str, str]:
    if isinstance(errors, dict):
        flat: dict[str, str] = {}
        for key, value in errors.items():
            name = prefix if key == "_schema" else f"{prefix}.{key}" if prefix else str(key)
            flat.update(_flatten(value, name))
        return flat
    if isinstance(errors, list) and all(isinstance(e, str) for e in errors):
        return {prefix: "; ".join(errors)}
    return {prefix: str(errors)}


def _load_hosts(raw: Any, problems: dict[str, str]) -> tuple[HostConfig, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list):
        problems["hosts"] = "must be an array of tables ([[hosts]])"
        return ()
    hosts: list[HostConfig] = []
    seen: set[str] = set()
    for i, entry in enumerate(raw):
        where = f"hosts[{i}]"
        if not isinstance(entry, dict):
            problems[where] = "must be a table"
            continue
        try:
            host = HOST_SCHEMA().load(entry)
        except ValidationError as err:
            problems.update(_flatten(err.messages, where))
            continue
        if host.name in seen:
            problems[f"{where}.name"] = f"{host.name!r} is listed twice"
        seen.add(host.name)
        hosts.append(host)
    return tuple(hosts)


def _is_placeholder(secret: str) -> bool:
    lowered = secret.strip().lower()
    return lowered in PLACEHOLDER_SECRETS or ("change" in lowered and "me" in lowered)


def _read(
    path: str | os.PathLike[str] | None, environ: Mapping[str, str]
) -> tuple[dict[str, Any], str]:
    """The file's contents, and where they came from ("defaults" when there is no file)."""
    explicit = path is not None or "WARDEN_CONFIG" in environ
    config_path = Path(
        path or environ.get("WARDEN_CONFIG") or default_config_path(environ)
    ).expanduser()
    if config_path.exists():
        try:
            return tomllib.loads(config_path.read_text()), str(config_path)
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{config_path}: not valid TOML: {err}", {"file": str(err)}) from err
    if explicit:
        raise ConfigError(
            f"config file {config_path} does not exist (create one with `warden init`)",
            {"file": "does not exist"},
        )
    return {}, "defaults"


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    dev: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read, merge and validate the configuration; ConfigError names each bad key."""
    environ = os.environ if environ is None else environ
    raw, source = _read(path, environ)
    problems: dict[str, str] = {}
    raw = _moved_keys(raw, environ, problems)
    for key in raw:
        if key not in SECTIONS and key != "hosts":
            problems[key] = f"unknown section (known: {', '.join(SECTIONS)}, hosts)"
    overrides = _env_overrides(environ)
    loaded: dict[str, Any] = {}
    for section, schema in SECTIONS.items():
        values = raw.get(section, {})
        if not isinstance(values, dict):
            problems[section] = "must be a table"
            continue
        merged = _merged(values, overrides.get(section, {}))
        if section == "storage":  # the default follows `environ`, not this process's
            merged.setdefault("data_dir", str(default_data_dir(environ)))
        try:
            loaded[section] = schema().load(merged)
        except ValidationError as err:
            problems.update(_flatten(err.messages, section))

    hosts = _load_hosts(raw.get("hosts"), problems)
    dev = dev or environ.get("WARDEN_DEV", "").lower() in ("1", "true", "yes")
    auth: AuthSettings | None = loaded.get("auth")
    if auth is not None:
        _check_jwt_secret(auth, dev, loaded, problems)

    if problems:
        lines = "\n".join(f"  {key}: {reason}" for key, reason in sorted(problems.items()))
        raise ConfigError(f"invalid configuration ({source}):\n{lines}", problems)
    _data_dir_key(loaded)
    return Settings(dev=dev, source=source, hosts=hosts, **loaded)


def data_dir_key_file(data_dir: Path) -> Path:
    """Where `warden init` makes Warden's SSH key when `ssh.key_file` names none."""
    return data_dir / "ssh" / "warden_ed25519"


def _data_dir_key(loaded: dict[str, Any]) -> None:
    """An empty `ssh.key_file` means the key `warden init` made in the data directory, once
    it exists: every service then logs in as users with the same key `warden key` shows."""
    ssh: SshSettings = loaded["ssh"]
    if ssh.key_file:
        return
    path = data_dir_key_file(loaded["storage"].data_dir)
    if path.is_file():
        loaded["ssh"] = dataclasses.replace(ssh, key_file=str(path))


def _check_jwt_secret(
    auth: AuthSettings, dev: bool, loaded: dict[str, Any], problems: dict[str, str]
) -> None:
    """A missing, placeholder or short `auth.jwt_secret` is a problem, except in dev mode,
    where `loaded` gets an ephemeral one instead (tokens do not survive a restart)."""
    secret = auth.jwt_secret
    if not secret or _is_placeholder(secret) or len(secret) < MIN_SECRET_LENGTH:
        if not dev:
            why = "is missing" if not secret else "is a placeholder or too short"
            problems["auth.jwt_secret"] = (
                f"{why}: set a random value of at least {MIN_SECRET_LENGTH} characters "
                "(`warden init` writes one; WARDEN_AUTH_JWT_SECRET overrides it), "
                "or pass --dev"
            )
        else:
            loaded["auth"] = dataclasses.replace(auth, jwt_secret=secrets.token_urlsafe(48))
