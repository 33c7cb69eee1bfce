"""Typed settings from one TOML file plus `WARDEN_<SECTION>_<KEY>` environment overrides.

Validated at start-up: an invalid value stops start-up with the key and the reason. Secrets
that are missing or placeholders are refused unless `dev` is set. Settings are passed down
from the composition root; nothing reads them from a global.
"""

from __future__ import annotations

import fnmatch
import json
import os
import re
import secrets
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from marshmallow import RAISE, Schema, ValidationError, fields, post_load, validate

from services.shared.errors import ConfigError

ENV_PREFIX = "WARDEN_"
LOG_LEVELS = ("debug", "info", "warning", "error")
PLACEHOLDER_SECRETS = {
    "change-me",
    "changeme",
    "secret",
    "placeholder",
    "xxx",
    "todo",
    "jwt-secret",
}
MIN_SECRET_LENGTH = 32


def _home(environ: Mapping[str, str]) -> Path:
    return Path(environ["HOME"]) if environ.get("HOME") else Path.home()


def default_config_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_CONFIG_HOME") or str(_home(environ) / ".config")
    return Path(base) / "warden" / "warden.toml"


def default_data_dir(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    base = environ.get("XDG_DATA_HOME") or str(_home(environ) / ".local" / "share")
    return Path(base) / "warden"


# --- typed settings --------------------------------------------------------------------------


@dataclass(frozen=True)
class LogSettings:
    level: str = "info"
    format: str = "text"


@dataclass(frozen=True)
class StorageSettings:
    data_dir: Path = field(default_factory=default_data_dir)
    # `{service}` is replaced by the service's name: each service owns its own database
    # (its own SQLite file by default); on PostgreSQL they may share one database.
    database_url: str = ""

    def database_url_for(self, service: str) -> str:
        url = self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/{{service}}.db"
        return url.replace("{service}", service)


@dataclass(frozen=True)
class BusConfig:
    amqp_url: str = "amqp://guest:guest@127.0.0.1:5672/"
    prefetch: int = 64
    max_deliveries: int = 5
    rpc_timeout_s: float = 5.0


@dataclass(frozen=True)
class GatewaySettings:
    host: str = "127.0.0.1"
    port: int = 8080
    health_timeout_s: float = 2.0
    cors_origins: tuple[str, ...] = ()
    # Failed logins allowed per username and per client address within the window.
    login_window_s: float = 300.0
    login_failures_per_user: int = 5
    login_failures_per_ip: int = 20
    # Events the live stream keeps so that a reconnecting browser resumes where it left off.
    stream_replay_events: int = 2000
    # The built web UI; empty means `frontend/dist` beside the code, when it exists.
    frontend_dir: str = ""


@dataclass(frozen=True)
class AuthSettings:
    jwt_secret: str = field(default="", repr=False)
    access_token_ttl_s: int = 900
    refresh_token_ttl_s: int = 7 * 24 * 3600


@dataclass(frozen=True)
class SshSettings:
    """How every service logs in to hosts (monitor, jobs, violations)."""

    # Empty: the user's ~/.ssh/known_hosts.
    known_hosts: str = ""
    accept_new_host_keys: bool = False
    connect_timeout_s: float = 10.0
    keepalive_s: float = 15.0
    # Warden's key for logging in as users (job owners, offenders); empty: the host's key_file.
    key_file: str = ""


@dataclass(frozen=True)
class MonitorSettings:
    interval_s: float = 5.0
    # Deadline of one poll; 0 means 80 % of the interval (a poll never runs into the next).
    poll_timeout_s: float = 0.0
    # Monitor this machine through NVML: auto (when it has an NVIDIA driver), on, off.
    local_nvml: str = "auto"
    local_name: str = ""  # name of this machine's entry (default: its hostname)
    # embedded (SQL, in the monitor's database) or influx (InfluxDB 2).
    tsdb: str = "embedded"
    raw_retention_h: float = 48.0
    rollup_retention_d: float = 90.0
    influx_url: str = ""
    influx_org: str = ""
    influx_bucket: str = "warden"
    influx_token: str = field(default="", repr=False)

    @property
    def poll_deadline_s(self) -> float:
        return self.poll_timeout_s or self.interval_s * 0.8


@dataclass(frozen=True)
class ReservationSettings:
    min_duration_min: float = 30.0
    max_duration_h: float = 192.0  # 8 days
    # A reserved GPU below this utilisation counts as idle in usage statistics.
    idle_below_percent: float = 5.0


ESCALATION_RECIPIENTS = ("offender", "owner", "admins")
DEFAULT_STEPS = (
    "0s terminal offender",
    "0s webhook owner+admins",
    "60s email offender+admins",
    "300s terminate",
    "600s kill",
)
# user:command pairs (`*` for any) whose GPU processes never violate. The command is the
# executable's base name; the user matters, so an offender cannot rename a program "Xorg".
DEFAULT_ALLOW = (
    "root:Xorg",
    "root:Xwayland",
    "root:gnome-shell",
    "gdm:*",
    "*:nvidia-persistenced",
)
_STEP = re.compile(
    r"^\s*(?P<delay>\d+(?:\.\d+)?)(?P<unit>ms|s|m|h)\s+(?P<action>[a-z][a-z0-9_-]*)"
    r"(?:\s+(?P<to>[a-z]+(?:\+[a-z]+)*))?\s*$"
)
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class EscalationStep:
    """`60s email offender+admins`: after 60 s of an open incident, the e-mail handler acts."""

    after_s: float
    action: str
    recipients: tuple[str, ...] = ()

    @property
    def text(self) -> str:
        delay = f"{self.after_s:g}s"
        return " ".join(
            [delay, self.action, *(["+".join(self.recipients)] if self.recipients else [])]
        )


def parse_step(text: str) -> EscalationStep:
    """One escalation step; ValueError says what is wrong with it."""
    found = _STEP.match(text)
    if found is None:
        raise ValueError(
            f"{text!r} is not '<delay><ms|s|m|h> <action> [recipient+recipient]', "
            "e.g. '60s email offender+admins'"
        )
    recipients = tuple(found["to"].split("+")) if found["to"] else ()
    unknown = [r for r in recipients if r not in ESCALATION_RECIPIENTS]
    if unknown:
        raise ValueError(
            f"{text!r}: unknown recipient {unknown[0]!r} "
            f"(known: {', '.join(ESCALATION_RECIPIENTS)})"
        )
    after_s = float(found["delay"]) * _UNIT_S[found["unit"]]
    return EscalationStep(after_s, found["action"], recipients)


def parse_allow_entry(text: str) -> tuple[str, str]:
    user, sep, command = text.partition(":")
    if not sep or not user or not command:
        raise ValueError(f"{text!r} is not 'user:command' ('*' matches any)")
    return user, command


@dataclass(frozen=True)
class WebhookTarget:
    """A chat or HTTP endpoint told about violations. The URL is a secret (it holds a token)."""

    url: str = field(repr=False)
    format: str = "slack"  # slack | mattermost | discord | teams | json
    secret: str = field(default="", repr=False)  # json: HMAC-SHA256 key of the signature header
    name: str = ""  # how logs and incident timelines name it (never the URL)

    @property
    def label(self) -> str:
        return self.name or self.format


@dataclass(frozen=True)
class SmtpSettings:
    host: str = ""  # empty: no e-mail is sent
    port: int = 587
    security: str = "starttls"  # starttls | tls (implicit) | none
    username: str = ""
    password: str = field(default="", repr=False)
    mail_from: str = "warden@localhost"
    timeout_s: float = 10.0


@dataclass(frozen=True)
class StepOverride:
    """Other escalation steps for the hosts whose names match one of `hosts` (fnmatch)."""

    hosts: tuple[str, ...]
    steps: tuple[EscalationStep, ...]


@dataclass(frozen=True)
class ViolationSettings:
    # reservations: a process of anyone but the owner (or a guest) on a reserved GPU;
    # strict: also any process on a GPU nobody reserved.
    mode: str = "reservations"
    allow: tuple[tuple[str, str], ...] = tuple(parse_allow_entry(e) for e in DEFAULT_ALLOW)
    steps: tuple[EscalationStep, ...] = tuple(parse_step(s) for s in DEFAULT_STEPS)
    overrides: tuple[StepOverride, ...] = ()
    # The built-in handlers this service runs, each a consumer with its own queue.
    handlers: tuple[str, ...] = ("terminal", "email", "webhook", "terminate", "kill")
    # terminal and terminate/kill log in as the offender (Warden's key in their
    # authorized_keys) or as the host's management user with `sudo -n`.
    act_as: str = "offender"
    term_grace_s: float = 10.0  # terminate: SIGTERM, then SIGKILL after this many seconds
    admin_emails: tuple[str, ...] = ()  # besides the e-mail addresses of admin accounts
    smtp: SmtpSettings = field(default_factory=SmtpSettings)
    webhooks: tuple[WebhookTarget, ...] = ()
    webhook_min_interval_s: float = 1.0  # per URL
    webhook_retries: int = 4

    def steps_for(self, host: str) -> tuple[EscalationStep, ...]:
        for override in self.overrides:
            if any(fnmatch.fnmatchcase(host, pattern) for pattern in override.hosts):
                return override.steps
        return self.steps


MULTIPLEXERS = ("screen", "tmux")


@dataclass(frozen=True)
class JobSettings:
    # Tasks run in detached sessions named warden-<job>-<task>: `screen -x` or `tmux attach`.
    multiplexer: str = "screen"
    # Where a task keeps its pid, exit code and log on the host (relative: to the owner's home).
    state_dir: str = ".warden/tasks"
    poll_interval_s: float = 2.0
    # Stop: SIGINT, SIGTERM after int_grace_s, SIGKILL term_grace_s after that.
    int_grace_s: float = 10.0
    term_grace_s: float = 10.0
    # A task whose host does not answer for this long is lost (until the host answers again).
    lost_after_s: float = 60.0
    # A queued job without a declared maximum run time needs its GPUs free this long.
    queue_min_window_s: float = 3600.0
    # Anti-starvation: the first queued job waiting this long keeps the free GPUs it needs
    # away from later jobs until it can start (0: off, later jobs always backfill).
    queue_hold_after_s: float = 0.0
    # A queued job gets SIGINT this long before someone else's reservation of its GPUs
    # starts, SIGKILL at the start; requeue_on_preempt puts it back in the queue.
    preempt_lead_s: float = 300.0
    requeue_on_preempt: bool = True
    # A job inside a reservation gets SIGINT this long before the reservation ends.
    reservation_stop_lead_s: float = 60.0
    # Ports for distributed-training templates (master port, TF cluster addresses).
    port_min: int = 29500
    port_max: int = 29999


@dataclass(frozen=True)
class HostConfig:
    """One monitored host: over SSH by default, or this machine through NVML."""

    name: str
    address: str = ""
    port: int = 22
    user: str = ""
    key_file: str = ""
    probe: str = "ssh"


@dataclass(frozen=True)
class Settings:
    log: LogSettings = field(default_factory=LogSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    bus: BusConfig = field(default_factory=BusConfig)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    ssh: SshSettings = field(default_factory=SshSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    reservations: ReservationSettings = field(default_factory=ReservationSettings)
    violations: ViolationSettings = field(default_factory=ViolationSettings)
    jobs: JobSettings = field(default_factory=JobSettings)
    hosts: tuple[HostConfig, ...] = ()
    dev: bool = False
    source: str = "defaults"


# --- schemas ---------------------------------------------------------------------------------


class _Section(Schema):
    class Meta:
        unknown = RAISE


class LogSchema(_Section):
    level = fields.String(load_default="info", validate=validate.OneOf(LOG_LEVELS))
    format = fields.String(load_default="text", validate=validate.OneOf(("text", "json")))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> LogSettings:
        return LogSettings(**data)


class StorageSchema(_Section):
    environ: Mapping[str, str] | None = None  # where the default data dir is looked up

    data_dir = fields.String(load_default=None, allow_none=True, validate=validate.Length(min=1))
    database_url = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> StorageSettings:
        url = data["database_url"]
        if url and not url.startswith(("sqlite+aiosqlite://", "postgresql+asyncpg://")):
            raise ValidationError(
                "must start with sqlite+aiosqlite:// or postgresql+asyncpg://", "database_url"
            )
        data_dir = (
            Path(data["data_dir"]).expanduser()
            if data["data_dir"]
            else default_data_dir(self.environ)
        )
        return StorageSettings(data_dir=data_dir, database_url=url)


class BusSchema(_Section):
    amqp_url = fields.String(load_default=BusConfig.amqp_url)
    prefetch = fields.Integer(load_default=64, validate=validate.Range(min=1, max=65535))
    max_deliveries = fields.Integer(load_default=5, validate=validate.Range(min=1, max=100))
    rpc_timeout_s = fields.Float(load_default=5.0, validate=validate.Range(min=0.01, max=300))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> BusConfig:
        if not data["amqp_url"].startswith(("amqp://", "amqps://")):
            raise ValidationError("must start with amqp:// or amqps://", "amqp_url")
        return BusConfig(**data)


class GatewaySchema(_Section):
    host = fields.String(load_default="127.0.0.1", validate=validate.Length(min=1))
    port = fields.Integer(load_default=8080, validate=validate.Range(min=0, max=65535))
    health_timeout_s = fields.Float(load_default=2.0, validate=validate.Range(min=0.05, max=60))
    cors_origins = fields.List(fields.String(), load_default=list)
    login_window_s = fields.Float(load_default=300.0, validate=validate.Range(min=1))
    login_failures_per_user = fields.Integer(load_default=5, validate=validate.Range(min=1))
    login_failures_per_ip = fields.Integer(load_default=20, validate=validate.Range(min=1))
    stream_replay_events = fields.Integer(
        load_default=2000, validate=validate.Range(min=0, max=1_000_000)
    )
    frontend_dir = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> GatewaySettings:
        return GatewaySettings(**{**data, "cors_origins": tuple(data["cors_origins"])})


class AuthSchema(_Section):
    jwt_secret = fields.String(load_default="")
    access_token_ttl_s = fields.Integer(load_default=900, validate=validate.Range(min=30))
    refresh_token_ttl_s = fields.Integer(
        load_default=7 * 24 * 3600, validate=validate.Range(min=60)
    )

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> AuthSettings:
        return AuthSettings(**data)


class SshSchema(_Section):
    known_hosts = fields.String(load_default="")
    accept_new_host_keys = fields.Boolean(load_default=False)
    connect_timeout_s = fields.Float(load_default=10.0, validate=validate.Range(min=0.1))
    keepalive_s = fields.Float(load_default=15.0, validate=validate.Range(min=1))
    key_file = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> SshSettings:
        return SshSettings(**data)


class MonitorSchema(_Section):
    interval_s = fields.Float(load_default=5.0, validate=validate.Range(min=0.1, max=3600))
    poll_timeout_s = fields.Float(load_default=0.0, validate=validate.Range(min=0, max=3600))
    local_nvml = fields.String(load_default="auto", validate=validate.OneOf(("auto", "on", "off")))
    local_name = fields.String(load_default="")
    tsdb = fields.String(load_default="embedded", validate=validate.OneOf(("embedded", "influx")))
    raw_retention_h = fields.Float(load_default=48.0, validate=validate.Range(min=0.1))
    rollup_retention_d = fields.Float(load_default=90.0, validate=validate.Range(min=0.1))
    influx_url = fields.String(load_default="")
    influx_org = fields.String(load_default="")
    influx_bucket = fields.String(load_default="warden")
    influx_token = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> MonitorSettings:
        if data["tsdb"] == "influx":
            for key in ("influx_url", "influx_org", "influx_token"):
                if not data[key]:
                    raise ValidationError('required when tsdb = "influx"', key)
        return MonitorSettings(**data)


class ReservationsSchema(_Section):
    min_duration_min = fields.Float(load_default=30.0, validate=validate.Range(min=1))
    max_duration_h = fields.Float(load_default=192.0, validate=validate.Range(min=0.1))
    idle_below_percent = fields.Float(load_default=5.0, validate=validate.Range(min=0, max=100))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ReservationSettings:
        if data["max_duration_h"] * 60 < data["min_duration_min"]:
            raise ValidationError("must be at least min_duration_min", "max_duration_h")
        return ReservationSettings(**data)


def _steps(values: list[str], key: str) -> tuple[EscalationStep, ...]:
    steps: list[EscalationStep] = []
    for i, text in enumerate(values):
        try:
            steps.append(parse_step(text))
        except ValueError as err:
            raise ValidationError(str(err), f"{key}[{i}]") from None
    delays = [step.after_s for step in steps]
    if delays != sorted(delays):
        raise ValidationError("steps must be listed in order of their delays", key)
    return tuple(steps)


class WebhookSchema(_Section):
    url = fields.String(
        required=True,
        validate=validate.URL(schemes={"http", "https"}, require_tld=False),
    )
    format = fields.String(
        load_default="slack",
        validate=validate.OneOf(("slack", "mattermost", "discord", "teams", "json")),
    )
    secret = fields.String(load_default="")
    name = fields.String(load_default="")

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> WebhookTarget:
        return WebhookTarget(**data)


class OverrideSchema(_Section):
    hosts = fields.List(fields.String(validate=validate.Length(min=1)), required=True)
    steps = fields.List(fields.String(), required=True)

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> StepOverride:
        return StepOverride(tuple(data["hosts"]), _steps(data["steps"], "steps"))


class ViolationsSchema(_Section):
    mode = fields.String(
        load_default="reservations", validate=validate.OneOf(("reservations", "strict"))
    )
    allow = fields.List(fields.String(), load_default=lambda: list(DEFAULT_ALLOW))
    steps = fields.List(fields.String(), load_default=lambda: list(DEFAULT_STEPS))
    overrides = fields.List(fields.Nested(OverrideSchema), load_default=list)
    handlers = fields.List(
        fields.String(
            validate=validate.OneOf(("terminal", "email", "webhook", "terminate", "kill"))
        ),
        load_default=lambda: list(ViolationSettings.handlers),
    )
    act_as = fields.String(
        load_default="offender", validate=validate.OneOf(("offender", "management"))
    )
    term_grace_s = fields.Float(load_default=10.0, validate=validate.Range(min=0, max=3600))
    admin_emails = fields.List(fields.Email(), load_default=list)
    smtp_host = fields.String(load_default="")
    smtp_port = fields.Integer(load_default=587, validate=validate.Range(min=1, max=65535))
    smtp_security = fields.String(
        load_default="starttls", validate=validate.OneOf(("starttls", "tls", "none"))
    )
    smtp_username = fields.String(load_default="")
    smtp_password = fields.String(load_default="")
    mail_from = fields.String(load_default="warden@localhost", validate=validate.Length(min=3))
    smtp_timeout_s = fields.Float(load_default=10.0, validate=validate.Range(min=0.1, max=300))
    webhooks = fields.List(fields.Nested(WebhookSchema), load_default=list)
    webhook_min_interval_s = fields.Float(
        load_default=1.0, validate=validate.Range(min=0, max=3600)
    )
    webhook_retries = fields.Integer(load_default=4, validate=validate.Range(min=0, max=20))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> ViolationSettings:
        allow: list[tuple[str, str]] = []
        for i, entry in enumerate(data["allow"]):
            try:
                allow.append(parse_allow_entry(entry))
            except ValueError as err:
                raise ValidationError(str(err), f"allow[{i}]") from None
        smtp = SmtpSettings(
            host=data["smtp_host"],
            port=data["smtp_port"],
            security=data["smtp_security"],
            username=data["smtp_username"],
            password=data["smtp_password"],
            mail_from=data["mail_from"],
            timeout_s=data["smtp_timeout_s"],
        )
        if smtp.password and not smtp.username:
            raise ValidationError(
                "set smtp_username too (a password alone logs in nobody)", "smtp_password"
            )
        return ViolationSettings(
            mode=data["mode"],
            allow=tuple(allow),
            steps=_steps(data["steps"], "steps"),
            overrides=tuple(data["overrides"]),
            handlers=tuple(dict.fromkeys(data["handlers"])),
            act_as=data["act_as"],
            term_grace_s=data["term_grace_s"],
            admin_emails=tuple(data["admin_emails"]),
            smtp=smtp,
            webhooks=tuple(data["webhooks"]),
            webhook_min_interval_s=data["webhook_min_interval_s"],
            webhook_retries=data["webhook_retries"],
        )


class JobsSchema(_Section):
    multiplexer = fields.String(load_default="screen", validate=validate.OneOf(MULTIPLEXERS))
    state_dir = fields.String(load_default=".warden/tasks", validate=validate.Length(min=1))
    poll_interval_s = fields.Float(load_default=2.0, validate=validate.Range(min=0.05))
    int_grace_s = fields.Float(load_default=10.0, validate=validate.Range(min=0))
    term_grace_s = fields.Float(load_default=10.0, validate=validate.Range(min=0))
    lost_after_s = fields.Float(load_default=60.0, validate=validate.Range(min=0))
    queue_min_window_s = fields.Float(load_default=3600.0, validate=validate.Range(min=0))
    queue_hold_after_s = fields.Float(load_default=0.0, validate=validate.Range(min=0))
    preempt_lead_s = fields.Float(load_default=300.0, validate=validate.Range(min=0))
    requeue_on_preempt = fields.Boolean(load_default=True)
    reservation_stop_lead_s = fields.Float(load_default=60.0, validate=validate.Range(min=0))
    port_min = fields.Integer(load_default=29500, validate=validate.Range(min=1024, max=65535))
    port_max = fields.Integer(load_default=29999, validate=validate.Range(min=1024, max=65535))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> JobSettings:
        if data["port_max"] < data["port_min"]:
            raise ValidationError("must be at least port_min", "port_max")
        if "\n" in data["state_dir"] or "\0" in data["state_dir"]:
            raise ValidationError("must be one line", "state_dir")
        return JobSettings(**data)


class HostSchema(_Section):
    name = fields.String(
        required=True,
        validate=validate.Regexp(
            r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$",
            error="letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit",
        ),
    )
    address = fields.String(load_default="")
    port = fields.Integer(load_default=22, validate=validate.Range(min=1, max=65535))
    user = fields.String(load_default="")
    key_file = fields.String(load_default="")
    probe = fields.String(load_default="ssh", validate=validate.OneOf(("ssh", "nvml")))

    @post_load
    def make(self, data: dict[str, Any], **_: Any) -> HostConfig:
        if data["probe"] == "ssh":
            for key in ("address", "user"):
                if not data[key]:
                    raise ValidationError("required for a host polled over SSH", key)
        return HostConfig(**data)


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
            host = HostSchema().load(entry)
        except ValidationError as err:
            problems.update(_flatten(err.messages, where))
            continue
        if host.name in seen:
            problems[f"{where}.name"] = f"{host.name!r} is listed twice"
        seen.add(host.name)
        hosts.append(host)
    return tuple(hosts)


SECTIONS: dict[str, type[_Section]] = {
    "log": LogSchema,
    "storage": StorageSchema,
    "bus": BusSchema,
    "gateway": GatewaySchema,
    "auth": AuthSchema,
    "ssh": SshSchema,
    "monitor": MonitorSchema,
    "reservations": ReservationsSchema,
    "violations": ViolationsSchema,
    "jobs": JobsSchema,
}


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


# --- loading ---------------------------------------------------------------------------------


def _env_overrides(environ: Mapping[str, str]) -> dict[str, dict[str, Any]]:
    """`WARDEN_BUS_AMQP_URL=...` → {"bus": {"amqp_url": "..."}}; lists are comma-separated."""
    found: dict[str, dict[str, Any]] = {}
    for section, schema in SECTIONS.items():
        for key, schema_field in schema().fields.items():
            if isinstance(schema_field, fields.List) and isinstance(
                schema_field.inner, fields.Nested
            ):
                continue  # tables (webhooks, overrides) come from the file only
            value = environ.get(f"{ENV_PREFIX}{section}_{key}".upper())
            if value is None:
                continue
            if isinstance(schema_field, fields.List):
                items = (item.strip() for item in value.split(","))
                found.setdefault(section, {})[key] = [item for item in items if item]
            else:
                found.setdefault(section, {})[key] = value
    return found


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


def _is_placeholder(secret: str) -> bool:
    lowered = secret.strip().lower()
    return lowered in PLACEHOLDER_SECRETS or ("change" in lowered and "me" in lowered)


def load_settings(
    path: str | os.PathLike[str] | None = None,
    *,
    dev: bool = False,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    """Read, merge and validate the configuration; ConfigError names each bad key."""
    environ = os.environ if environ is None else environ
    explicit = path is not None or "WARDEN_CONFIG" in environ
    config_path = Path(
        path or environ.get("WARDEN_CONFIG") or default_config_path(environ)
    ).expanduser()
    raw: dict[str, Any] = {}
    if config_path.exists():
        try:
            raw = tomllib.loads(config_path.read_text())
        except tomllib.TOMLDecodeError as err:
            raise ConfigError(f"{config_path}: not valid TOML: {err}", {"file": str(err)}) from err
        source = str(config_path)
    elif explicit:
        raise ConfigError(
            f"config file {config_path} does not exist (create one with `warden init`)",
            {"file": "does not exist"},
        )
    else:
        source = "defaults"

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
        merged = {**values, **overrides.get(section, {})}
        section_schema = schema()
        if isinstance(section_schema, StorageSchema):
            section_schema.environ = environ
        try:
            loaded[section] = section_schema.load(merged)
        except ValidationError as err:
            problems.update(_flatten(err.messages, section))

    hosts = _load_hosts(raw.get("hosts"), problems)
    dev = dev or environ.get("WARDEN_DEV", "").lower() in ("1", "true", "yes")
    auth: AuthSettings | None = loaded.get("auth")
    if auth is not None:
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
                # Dev mode: an ephemeral secret; tokens do not survive a restart.
                loaded["auth"] = AuthSettings(
                    jwt_secret=secrets.token_urlsafe(48),
                    access_token_ttl_s=auth.access_token_ttl_s,
                    refresh_token_ttl_s=auth.refresh_token_ttl_s,
                )

    if problems:
        lines = "\n".join(f"  {key}: {reason}" for key, reason in sorted(problems.items()))
        raise ConfigError(f"invalid configuration ({source}):\n{lines}", problems)
    return Settings(dev=dev, source=source, hosts=hosts, **loaded)


# --- `warden init` ---------------------------------------------------------------------------

CONFIG_TEMPLATE = """\
# Warden configuration. Every option is shown with its default.
# Any option can be overridden by an environment variable WARDEN_<SECTION>_<KEY>,
# e.g. WARDEN_BUS_AMQP_URL or WARDEN_AUTH_JWT_SECRET.

[log]
# debug | info | warning | error
level = "info"
# text (one line per event, key=value) | json (one JSON object per line)
format = "text"

[storage]
# Where Warden keeps its data (SQLite databases, the embedded metrics store).
data_dir = {data_dir}
# Empty: one SQLite file per service under data_dir. For PostgreSQL, for example:
# database_url = "postgresql+asyncpg://warden@db.example/warden"
# "{{service}}" in the URL is replaced by the service's name.
database_url = ""

[bus]
# RabbitMQ, used by `warden run <service>`; `warden run all` uses an in-process bus.
amqp_url = "amqp://guest:guest@127.0.0.1:5672/"
# Messages a consumer may hold unacknowledged at once.
prefetch = 64
# A handler that fails this many times sends its message to the dead-letter queue.
max_deliveries = 5
# Default deadline of an RPC call, in seconds.
rpc_timeout_s = 5.0

[gateway]
host = "127.0.0.1"
port = 8080
# How long GET /api/v1/health waits for each service, in seconds.
health_timeout_s = 2.0
# Origins allowed by CORS; empty means CORS is off.
cors_origins = []
# Failed logins allowed per username and per client address within login_window_s.
login_window_s = 300.0
login_failures_per_user = 5
login_failures_per_ip = 20
# Events the live stream keeps so that a reconnecting browser resumes without a full reload.
stream_replay_events = 2000
# The built web UI served at /; empty means frontend/dist beside the code, when it exists.
frontend_dir = ""

[auth]
# Signs access tokens. Keep it secret; a random value was generated for this file.
jwt_secret = {jwt_secret}
access_token_ttl_s = 900
refresh_token_ttl_s = 604800

[ssh]
# How the monitor, the jobs and the violation handlers log in to hosts.
# Host keys are checked against this file; empty means ~/.ssh/known_hosts.
known_hosts = ""
# true: record the key of a host seen for the first time (a changed key is still refused).
accept_new_host_keys = false
connect_timeout_s = 10.0
# SSH keep-alive interval in seconds.
keepalive_s = 15.0
# Warden's key for logging in as users (job owners, offenders): its public half goes into
# their ~/.ssh/authorized_keys (`warden key` prints it). Empty: the host's key_file.
key_file = ""

[monitor]
# Seconds between two polls of a host.
interval_s = 5.0
# Deadline of one poll in seconds; 0 means 80 % of interval_s.
poll_timeout_s = 0.0
# Monitor this machine through NVML: auto (when it has an NVIDIA driver), on, off.
local_nvml = "auto"
# Name of this machine in Warden (default: its hostname).
local_name = ""
# Where GPU and CPU time series go: embedded (the monitor's database) or influx (InfluxDB 2).
tsdb = "embedded"
# Embedded store: raw samples kept this many hours, 1-minute rollups this many days.
raw_retention_h = 48.0
rollup_retention_d = 90.0
# InfluxDB 2 (tsdb = "influx"); the token is a secret (WARDEN_MONITOR_INFLUX_TOKEN).
influx_url = ""
influx_org = ""
influx_bucket = "warden"
influx_token = ""

[reservations]
# Shortest and longest reservation anyone may make.
min_duration_min = 30.0
max_duration_h = 192.0
# In usage statistics, a reserved GPU below this utilisation (%) counts as idle.
idle_below_percent = 5.0

[violations]
# reservations: a process of anyone but the owner (or a guest) on a reserved GPU violates;
# strict: also any process on a GPU that nobody reserved.
mode = "reservations"
# "user:command" pairs ("*" for any; command = the executable's name) that never violate.
allow = ["root:Xorg", "root:Xwayland", "root:gnome-shell", "gdm:*", "*:nvidia-persistenced"]
# Escalation: "<delay since the incident opened> <action> [offender+owner+admins]", in order.
# Actions: terminal, email, webhook, terminate (SIGTERM, then SIGKILL), kill, or the name a
# plugin of yours listens for (see docs/plugins.md).
steps = [
    "0s terminal offender",
    "0s webhook owner+admins",
    "60s email offender+admins",
    "300s terminate",
    "600s kill",
]
# Built-in handlers this service runs, each a consumer on its own queue.
handlers = ["terminal", "email", "webhook", "terminate", "kill"]
# terminal/terminate/kill log in as the offender with Warden's key ([ssh] key_file, in their
# authorized_keys) or as the host's management user with `sudo -n` ("management").
act_as = "offender"
# terminate: seconds between SIGTERM and SIGKILL.
term_grace_s = 10.0
# E-mail (empty smtp_host: none). smtp_security: starttls | tls | none.
smtp_host = ""
smtp_port = 587
smtp_security = "starttls"
smtp_username = ""
smtp_password = ""
mail_from = "warden@localhost"
smtp_timeout_s = 10.0
# Who gets "admins" mail besides the addresses of admin accounts.
admin_emails = []
# Webhooks: per-URL minimum interval between two messages, retries on 429 and 5xx.
webhook_min_interval_s = 1.0
webhook_retries = 4
# [[violations.webhooks]]
# url = "https://hooks.slack.com/services/..."   # a secret: never logged
# format = "slack"                               # slack | mattermost | discord | teams | json
# secret = ""                                    # json: HMAC-SHA256 key (X-Warden-Signature)
# name = "lab-chat"
# [[violations.overrides]]                       # other steps for some hosts
# hosts = ["dgx*"]
# steps = ["0s terminal offender", "120s kill"]

[jobs]
# Tasks run as their owner's account (Warden's key, [ssh] key_file, in their authorized_keys)
# inside a detached screen or tmux session named warden-<job>-<task>.
multiplexer = "screen"
# pid, exit code and log of each task on the host (relative to the owner's home).
state_dir = ".warden/tasks"
poll_interval_s = 2.0
# Stop: SIGINT, then SIGTERM after int_grace_s, then SIGKILL after term_grace_s more.
int_grace_s = 10.0
term_grace_s = 10.0
# A task whose host does not answer for this long is "lost" until the host answers again.
lost_after_s = 60.0
# Queue: GPUs must be free and unreserved by others this long when a job declares no
# maximum run time; SIGINT this long before someone else's reservation starts (SIGKILL at
# its start), then back in the queue if requeue_on_preempt.
queue_min_window_s = 3600.0
# The first job waiting this long keeps the free GPUs it needs from later jobs (0: off).
queue_hold_after_s = 0.0
preempt_lead_s = 300.0
requeue_on_preempt = true
# Jobs inside a reservation get SIGINT this long before it ends.
reservation_stop_lead_s = 60.0
# Ports for the distributed-training templates.
port_min = 29500
port_max = 29999

# One [[hosts]] table per GPU server, polled over SSH with one command per interval.
# `warden hosts check` tests them all. Options: name, address, port (22), user,
# key_file (empty: your SSH agent and default keys), probe ("ssh" or "nvml").
# [[hosts]]
# name = "dgx1"
# address = "dgx1.lab.example"
# user = "warden"
# key_file = "~/.ssh/warden_ed25519"
"""


def render_config_template(data_dir: Path | None = None) -> str:
    # JSON string literals are valid TOML basic strings: quotes and backslashes escaped.
    return CONFIG_TEMPLATE.format(
        data_dir=json.dumps(str(data_dir or default_data_dir())),
        jwt_secret=json.dumps(secrets.token_urlsafe(48)),
    )
