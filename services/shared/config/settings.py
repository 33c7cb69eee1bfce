"""The typed settings, and every configuration key declared once on its field (see declare.py).

A section's docstring introduces it in the template `warden init` writes. Rules across keys
(influx keys required when tsdb = "influx", port_max ≥ port_min, …) are in load.py.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import os
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from marshmallow import validate

from services.shared.config.declare import FLAT, about, option, parsed
from services.shared.config.delivery import SmtpSettings, WebhookTarget
from services.shared.config.escalation import (
    DEFAULT_ALLOW,
    DEFAULT_STEPS,
    OPT_IN_STEPS,
    EscalationStep,
    parse_allow_entry,
    parse_step,
)
from services.shared.config.health import HealthSettings
from services.shared.config.ldap import LdapSettings
from services.shared.config.metrics import MetricsSettings
from services.shared.config.monitor import MonitorSettings
from services.shared.config.queue import QueueSettings
from services.shared.config.replicas import ReplicaSettings
from services.shared.config.scheduling import SchedulingSettings

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


@dataclass(frozen=True)
class LogSettings:
    """How every service logs."""

    level: str = option(
        "info", "How much is logged.", choices=("debug", "info", "warning", "error")
    )
    format: str = option(
        "text",
        "text: one line per event, key=value; json: one JSON object per line.",
        choices=("text", "json"),
    )


@dataclass(frozen=True)
class StorageSettings:
    """Where Warden keeps its data."""

    data_dir: Path = field(
        default_factory=default_data_dir,
        metadata=about(
            "SQLite databases and the embedded metrics store go here.",
            min_length=1,
            shown="`$XDG_DATA_HOME/warden` (`~/.local/share/warden`)",
        ),
    )
    database_url: str = option(
        "",
        "Empty: one SQLite file per service under data_dir. For PostgreSQL, e.g. "
        '"postgresql+asyncpg://warden@db.example/warden". "{service}" in the URL is replaced '
        "by the service's name: each service owns its database; on PostgreSQL they may share one.",
        prefixes=("sqlite+aiosqlite://", "postgresql+asyncpg://"),
    )

    def database_url_for(self, service: str) -> str:
        url = self.database_url or f"sqlite+aiosqlite:///{self.data_dir}/{{service}}.db"
        return url.replace("{service}", service)


@dataclass(frozen=True)
class BusConfig:
    """The message bus between the services."""

    amqp_url: str = option(
        "amqp://guest:guest@127.0.0.1:5672/",
        "RabbitMQ, used by `warden run <service>`; `warden run all` uses an in-process bus.",
        prefixes=("amqp://", "amqps://"),
    )
    prefetch: int = option(
        64, "Messages a consumer may hold unacknowledged at once.", min=1, max=65535
    )
    max_deliveries: int = option(
        5,
        "A handler that fails this many times sends its message to the dead-letter queue.",
        min=1,
        max=100,
    )
    rpc_timeout_s: float = option(
        5.0, "Default deadline of an RPC call, in seconds.", min=0.01, max=300
    )
    connect_timeout_s: float = option(
        10.0,
        "Deadline of one attempt to connect to RabbitMQ, in seconds: a broker that accepts the "
        "connection but does not answer within it counts as unreachable (at start-up it is "
        "tried again, see `warden run --connect-wait`).",
        min=0.1,
        max=300,
    )


IpNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network


def proxy_network(text: str) -> IpNetwork:
    try:
        return ipaddress.ip_network(text.strip(), strict=False)
    except ValueError:
        raise ValueError(f"{text!r} is not an IP address or network (10.0.0.0/8)") from None


@dataclass(frozen=True)
class GatewaySettings:
    """The HTTP API, the live stream and the web UI."""

    host: str = option("127.0.0.1", "Address the gateway listens on.", min_length=1)
    port: int = option(8080, "Port the gateway listens on.", min=0, max=65535)
    health_timeout_s: float = option(
        2.0,
        "How long GET /api/v1/health waits for each service, in seconds.",
        min=0.05,
        max=60,
    )
    cors_origins: tuple[str, ...] = option((), "Origins allowed by CORS; empty: CORS is off.")
    login_window_s: float = option(
        300.0, "The window, in seconds, in which failed logins are counted.", min=1
    )
    login_failures_per_user: int = option(
        5, "Failed logins allowed per username within login_window_s.", min=1
    )
    login_failures_per_ip: int = option(
        20, "Failed logins allowed per client address within login_window_s.", min=1
    )
    stream_replay_events: int = option(
        2000,
        "Events the live stream keeps so that a reconnecting browser resumes where it left "
        "off, without a full reload.",
        min=0,
        max=1_000_000,
    )
    stream_resume_window_s: float = option(
        5.0,
        "A browser resuming the live stream on another gateway replica is sent again every "
        "event that arrived this long before its last one (replicas may receive events in a "
        "different order within it); it drops those it has by event_id.",
        min=0.1,
        max=300,
    )
    frontend_dir: str = option(
        "",
        "The built web UI served at /; empty: the one in the installed package (a wheel), "
        "else frontend/dist beside the code, when it exists.",
    )
    public_url: str = option(
        "",
        "The web UI's address as people reach it (e.g. https://warden.lab.example), for links "
        "in messages (an idle reservation's keep/release links); empty: http://host:port.",
    )
    trusted_proxies: tuple[IpNetwork, ...] = parsed(
        (),
        proxy_network,
        "Reverse proxies in front of the gateway (addresses or networks, e.g. 127.0.0.1 or "
        "10.0.0.0/8): for requests from them the client is the nearest untrusted address in "
        "X-Forwarded-For (logins are limited per client address). Empty: the TCP peer is "
        "the client.",
    )


@dataclass(frozen=True)
class AuthSettings:
    """Logins and their tokens."""

    jwt_secret: str = option(
        "",
        "Signs access tokens; keep it secret. `warden init` writes a random one; a missing, "
        f"placeholder or short one (under {MIN_SECRET_LENGTH} characters) is refused unless "
        "--dev is given.",
        secret=True,
    )
    access_token_ttl_s: int = option(900, "How long an access token is valid, in seconds.", min=30)
    refresh_token_ttl_s: int = option(
        7 * 24 * 3600,
        "How long a login lasts without a new password (a refresh token), in seconds.",
        min=60,
    )
    password_link_ttl_s: int = option(
        7 * 86400, "How long an invite or password-reset link works (once), in seconds.", min=60
    )
    ssh_signup: bool = option(
        False,
        "true: people may create their own `user` account by proving a Unix account on a host "
        "of the inventory: they put Warden's public key (ssh.key_file) into its "
        "~/.ssh/authorized_keys and sign up on the web UI or POST /api/v1/signup.",
    )
    ssh_signup_groups: tuple[str, ...] = option(
        (), "Groups an account made by SSH signup joins, besides every default group."
    )
    ldap: LdapSettings = field(
        default_factory=LdapSettings, metadata=about("Sign-in with directory accounts.")
    )


@dataclass(frozen=True)
class SshSettings:
    """How the monitor, the jobs and the violation handlers log in to hosts."""

    known_hosts: str = option(
        "", "Host keys are checked against this file; empty: ~/.ssh/known_hosts."
    )
    accept_new_host_keys: bool = option(
        False,
        "true: record the key of a host seen for the first time (a changed key is still refused).",
    )
    connect_timeout_s: float = option(
        10.0, "Deadline of opening an SSH connection, in seconds.", min=0.1
    )
    keepalive_s: float = option(15.0, "SSH keep-alive interval, in seconds.", min=1)
    key_file: str = option(
        "",
        "Warden's key for logging in as users (job owners, offenders): its public half goes "
        "into their ~/.ssh/authorized_keys (`warden key` prints it). Empty: "
        "`<data_dir>/ssh/warden_ed25519` if it exists (`warden init` makes it), else the "
        "host's key_file.",
    )


@dataclass(frozen=True)
class ReservationSettings:
    """What reservations anyone may make."""

    min_duration_min: float = option(30.0, "Shortest reservation, in minutes.", min=1)
    max_duration_h: float = option(
        192.0, "Longest reservation, in hours (192: 8 days); at least min_duration_min.", min=0.1
    )
    idle_below_percent: float = option(
        5.0,
        "In usage statistics, a reserved GPU below this utilisation (%) counts as idle.",
        min=0,
        max=100,
    )


@dataclass(frozen=True, kw_only=True)
class StepOverride:
    """Other escalation steps for the hosts whose names match one of `hosts` (fnmatch) or that
    carry one of `labels` (at least one of the two is given)."""

    hosts: tuple[str, ...] = option(
        (),
        "Host name patterns (fnmatch).",
        min_length=1,
        example=("dgx*",),
    )
    labels: tuple[str, ...] = option(
        (),
        "Host labels ([[hosts]] labels, or set in the inventory): a host with any of them matches.",
        min_length=1,
        example=("a100",),
    )
    steps: tuple[EscalationStep, ...] = field(
        metadata=about(
            "Escalation steps for these hosts, written as [violations] steps.",
            parse=parse_step,
            example=("0s terminal offender", "0s email offender+owner", "30m terminate"),
        )
    )


HANDLERS = ("terminal", "email", "webhook", "terminate", "kill")


@dataclass(frozen=True)
class ViolationSettings:
    """Processes on GPUs they should not use, and what happens to them."""

    mode: str = option(
        "reservations",
        "reservations: a process of anyone but the owner (or a guest) on a reserved GPU "
        "violates; strict: also any process on a GPU that nobody reserved.",
        choices=("reservations", "strict"),
    )
    allow: tuple[tuple[str, str], ...] = parsed(
        DEFAULT_ALLOW,
        parse_allow_entry,
        '"user:command" pairs (`*` for any) whose GPU processes never violate. The command is '
        "the executable's base name; the user matters, so an offender cannot rename a "
        'program "Xorg".',
    )
    steps: tuple[EscalationStep, ...] = parsed(
        DEFAULT_STEPS,
        parse_step,
        "Escalation, in order of delay: `<delay since the incident opened><ms|s|m|h> <action> "
        "[offender+owner+admins]`. Actions: terminal, email, webhook, terminate (SIGTERM, then "
        "SIGKILL), kill, or the name a plugin of yours listens for (see "
        "docs/developers/plugins.md). The default only tells people; terminate and kill are "
        "opt-in.",
        opt_in=(
            "Opt-in: to also stop an offender's processes (they lose unsaved work), use these "
            "steps instead: terminate sends SIGTERM, then SIGKILL after term_grace_s; kill "
            "sends SIGKILL.",
            OPT_IN_STEPS,
        ),
    )
    handlers: tuple[str, ...] = option(
        HANDLERS,
        "Built-in handlers this service runs, each a consumer on its own queue.",
        choices=HANDLERS,
    )
    act_as: str = option(
        "offender",
        "terminate and kill (and terminal, with terminal_as = act_as) log in as the offender "
        "with Warden's key ([ssh] key_file, in their authorized_keys) or as the host's "
        "management user with `sudo -n`.",
        choices=("offender", "management"),
    )
    terminal_as: str = option(
        "management",
        "terminal: management: the host's management user writes the warning to the "
        "offender's terminals as a member of group tty (no sudo, nothing in the offender's "
        "authorized_keys); act_as: log in as act_as says.",
        choices=("management", "act_as"),
    )
    term_grace_s: float = option(
        10.0, "terminate: seconds between SIGTERM and SIGKILL.", min=0, max=3600
    )
    smtp: SmtpSettings = field(default_factory=SmtpSettings, metadata=FLAT)
    admin_emails: tuple[str, ...] = option(
        (),
        'E-mail addresses that get "admins" mail besides those of the admin accounts.',
        check=validate.Email(),
    )
    webhook_min_interval_s: float = option(
        1.0, "Webhooks: the least seconds between two messages to one URL.", min=0, max=3600
    )
    webhook_retries: int = option(4, "Webhooks: retries after HTTP 429 or 5xx.", min=0, max=20)
    webhooks: tuple[WebhookTarget, ...] = option(
        (), "Chat or HTTP endpoints told about violations."
    )
    overrides: tuple[StepOverride, ...] = option(
        (),
        "Other steps for some hosts; the first override whose hosts or labels match applies.",
    )
    notify_per_minute: int = option(
        6,
        "Notifications: at most this many a minute per user and channel (e-mail, chat, "
        "browser); the rest are not sent and recorded as limited.",
        min=1,
        max=1000,
    )

    def steps_for(self, host: str, labels: Collection[str] = ()) -> tuple[EscalationStep, ...]:
        """The steps for `host`, which carries `labels`: those of the first override that
        matches its name or one of its labels, else `steps`."""
        for override in self.overrides:
            if any(fnmatch.fnmatchcase(host, pattern) for pattern in override.hosts) or any(
                label in labels for label in override.labels
            ):
                return override.steps
        return self.steps


@dataclass(frozen=True)
class JobSettings:
    """Jobs: each task runs as its owner (Warden's key, [ssh] key_file, in their
    authorized_keys) in a detached screen or tmux session named `warden-<job>-<task>`."""

    multiplexer: str = option(
        "screen",
        "Attach to a task with `screen -x` or `tmux attach`.",
        choices=("screen", "tmux"),
    )
    state_dir: str = option(
        ".warden/tasks",
        "Where a task keeps its pid, exit code and log on the host (relative: to the owner's "
        "home); one line.",
        min_length=1,
    )
    poll_interval_s: float = option(
        2.0, "Seconds between two looks at the running tasks and the queue.", min=0.05
    )
    int_grace_s: float = option(
        10.0, "Stopping a task: SIGINT, then SIGTERM after this many seconds.", min=0
    )
    term_grace_s: float = option(
        10.0, "Stopping a task: SIGKILL this many seconds after SIGTERM.", min=0
    )
    lost_after_s: float = option(
        60.0,
        'A task whose host does not answer for this many seconds is "lost" until the host '
        "answers again.",
        min=0,
    )
    queue_min_window_s: float = option(
        3600.0,
        "Seconds a queued job that declares no maximum run time needs its GPUs free and "
        "unreserved by others.",
        min=0,
    )
    queue_hold_after_s: float = option(
        0.0,
        "Anti-starvation: the first queued job waiting this many seconds keeps the free GPUs "
        "it needs from later jobs until it can start; 0: off, later jobs always backfill.",
        min=0,
    )
    preempt_lead_s: float = option(
        300.0,
        "A queued job gets its hand-back signal (SIGTERM unless it declares another) this many "
        "seconds before someone else's reservation of its GPUs starts, SIGKILL at its start "
        "(a job's handback_grace_s overrides it).",
        min=0,
    )
    requeue_on_preempt: bool = option(
        True,
        "true: a queued job stopped for someone else's reservation, or whose GPU failed or "
        "host was lost, goes back in the queue (a job's own `requeue` wins).",
    )
    early_failure_s: float = option(
        300.0,
        "A job that fails on its own (non-zero exit status) within this many seconds of its "
        "start is not retried, and its owner is told at once with the tail of its output.",
        min=0,
    )
    reservation_stop_lead_s: float = option(
        60.0,
        "A job inside a reservation gets SIGINT this many seconds before the reservation ends.",
        min=0,
    )
    port_min: int = option(
        29500,
        "Lowest port of the distributed-training templates (master port, TF cluster addresses).",
        min=1024,
        max=65535,
    )
    port_max: int = option(
        29999,
        "Highest port of the distributed-training templates; at least port_min.",
        min=1024,
        max=65535,
    )
    cpu_affinity: bool = option(
        False,
        "true: a task's command runs under `numactl --cpunodebind` (or `taskset -c`) on the "
        "CPUs nearest its GPUs, as the host's `nvidia-smi topo -m` names them.",
    )


HOST_NAME = "letters, digits, '.', '_' and '-' (up to 63), starting with a letter or digit"


@dataclass(frozen=True)
class HostConfig:
    """One monitored host: over SSH by default, or this machine through NVML."""

    name: str = field(
        metadata=about(
            f"How Warden names the host: {HOST_NAME}.",
            check=validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", error=HOST_NAME),
            example="dgx1",
        )
    )
    address: str = option(
        "", 'Host name or address; required when probe = "ssh".', example="dgx1.lab.example"
    )
    port: int = option(22, "SSH port.", min=1, max=65535)
    user: str = option(
        "", 'The user Warden logs in as; required when probe = "ssh".', example="warden"
    )
    key_file: str = option(
        "",
        "Private key to log in with; empty: your SSH agent and default keys.",
        example="~/.ssh/warden_ed25519",
    )
    probe: str = option(
        "ssh",
        "ssh: polled over SSH, one command per interval; nvml: this machine, through NVML.",
        choices=("ssh", "nvml"),
    )
    labels: tuple[str, ...] = option(
        (),
        "Groups this host belongs to: a filter on the dashboard, and [[violations.overrides]] "
        "may match them.",
        check=validate.Regexp(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$", error=HOST_NAME),
        example=("a100", "lab-b"),
    )
    host_key: str = option(
        "",
        "The host's public key as in known_hosts (`ssh-ed25519 AAAA...`), trusted for this "
        "host; empty: checked against [ssh] known_hosts.",
    )


@dataclass(frozen=True)
class Settings:
    log: LogSettings = field(default_factory=LogSettings)
    storage: StorageSettings = field(default_factory=StorageSettings)
    bus: BusConfig = field(default_factory=BusConfig)
    replicas: ReplicaSettings = field(default_factory=ReplicaSettings)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    gateway: GatewaySettings = field(default_factory=GatewaySettings)
    auth: AuthSettings = field(default_factory=AuthSettings)
    ssh: SshSettings = field(default_factory=SshSettings)
    monitor: MonitorSettings = field(default_factory=MonitorSettings)
    reservations: ReservationSettings = field(default_factory=ReservationSettings)
    violations: ViolationSettings = field(default_factory=ViolationSettings)
    jobs: JobSettings = field(default_factory=JobSettings)
    scheduling: SchedulingSettings = field(default_factory=SchedulingSettings)
    health: HealthSettings = field(default_factory=HealthSettings)
    queue: QueueSettings = field(default_factory=QueueSettings)
    hosts: tuple[HostConfig, ...] = option(
        (),
        "One table per GPU server: seeds the monitor's inventory at start-up (hosts are then "
        "managed with `warden hosts`, the API or the Hosts page); `warden hosts check --local` "
        "tests them from here.",
    )
    dev: bool = False
    source: str = "defaults"
