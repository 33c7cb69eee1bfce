"""Typed settings from one TOML file plus `WARDEN_<SECTION>_<KEY>` environment overrides.

Every key is declared once, on a field of its settings dataclass (settings.py): its type,
default, allowed values and meaning. The validation (schema.py), the template `warden init`
writes and the docs' table of options (render.py) are generated from those declarations.
Validated at start-up; settings are passed down from the composition root, never read from a
global.
"""

from services.shared.config.escalation import (
    DEFAULT_ALLOW,
    DEFAULT_STEPS,
    ESCALATION_RECIPIENTS,
    EscalationStep,
    parse_allow_entry,
    parse_step,
)
from services.shared.config.load import (
    ENV_PREFIX,
    MOVED_KEYS,
    SECTIONS,
    data_dir_key_file,
    load_settings,
)
from services.shared.config.monitor import MonitorSettings
from services.shared.config.render import render_config_template
from services.shared.config.replicas import ReplicaSettings
from services.shared.config.settings import (
    MIN_SECRET_LENGTH,
    AuthSettings,
    BusConfig,
    GatewaySettings,
    HostConfig,
    JobSettings,
    LogSettings,
    ReservationSettings,
    Settings,
    SmtpSettings,
    SshSettings,
    StepOverride,
    StorageSettings,
    ViolationSettings,
    WebhookTarget,
    default_config_path,
    default_data_dir,
)

__all__ = [
    "DEFAULT_ALLOW",
    "DEFAULT_STEPS",
    "ENV_PREFIX",
    "ESCALATION_RECIPIENTS",
    "MIN_SECRET_LENGTH",
    "MOVED_KEYS",
    "SECTIONS",
    "AuthSettings",
    "BusConfig",
    "EscalationStep",
    "GatewaySettings",
    "HostConfig",
    "JobSettings",
    "LogSettings",
    "MonitorSettings",
    "ReplicaSettings",
    "ReservationSettings",
    "Settings",
    "SmtpSettings",
    "SshSettings",
    "StepOverride",
    "StorageSettings",
    "ViolationSettings",
    "WebhookTarget",
    "data_dir_key_file",
    "default_config_path",
    "default_data_dir",
    "load_settings",
    "parse_allow_entry",
    "parse_step",
    "render_config_template",
]
