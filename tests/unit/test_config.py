"""Settings: defaults, TOML file, WARDEN_* overrides, validation naming the key, the template.

Every test passes `environ` explicitly and points XDG_* and HOME at tmp_path, so nothing reads
or writes the developer's real configuration.
"""

from __future__ import annotations

import itertools
import os
import re
import sys
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest
from marshmallow import fields

from services.shared import config as config_module
from services.shared.config import (
    MIN_SECRET_LENGTH,
    SECTIONS,
    Settings,
    StorageSettings,
    load_settings,
    render_config_template,
)
from services.shared.config.__main__ import main as config_main
from services.shared.config.render import (
    DOCS_BEGIN,
    DOCS_COMMAND,
    DOCS_END,
    DOCS_PAGE,
    blocks,
    with_options_table,
)
from services.shared.errors import ConfigError

SECRET = "k" * MIN_SECRET_LENGTH + "-random-enough"


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The default paths are derived from the process environment: keep them in tmp_path."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / ".local" / "share"))
    for name in [n for n in os.environ if n.startswith("WARDEN_")]:
        monkeypatch.delenv(name)
    return home


@pytest.fixture
def write_config(tmp_path: Path) -> Callable[[str], Path]:
    def write(text: str) -> Path:
        path = tmp_path / "warden.toml"
        path.write_text(text)
        return path

    return write


def _error_keys(err: pytest.ExceptionInfo[ConfigError]) -> set[str]:
    return set(err.value.details)


# --- defaults and files -----------------------------------------------------------------------


def test_defaults_without_a_file_in_dev_mode(isolated_home: Path) -> None:
    settings = load_settings(dev=True, environ={})

    assert settings.source == "defaults"
    assert settings.dev is True
    assert settings.log.level == "info"
    assert settings.log.format == "text"
    assert settings.bus.amqp_url == "amqp://guest:guest@127.0.0.1:5672/"
    assert settings.bus.prefetch == 64
    assert settings.bus.max_deliveries == 5
    assert settings.bus.rpc_timeout_s == 5.0
    assert settings.bus.connect_timeout_s == 10.0
    assert settings.gateway.host == "127.0.0.1"  # bind to loopback by default
    assert settings.gateway.port == 8080
    assert settings.gateway.cors_origins == ()
    assert settings.storage.database_url == ""
    assert settings.storage.data_dir == isolated_home / ".local" / "share" / "warden"


def test_defaults_without_a_file_need_a_secret_outside_dev() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(environ={})
    assert _error_keys(err) == {"auth.jwt_secret"}


def test_file_values_are_read(write_config: Callable[[str], Path], tmp_path: Path) -> None:
    path = write_config(
        f"""
        [log]
        level = "debug"
        format = "json"
        [storage]
        data_dir = "{tmp_path / "data"}"
        [bus]
        amqp_url = "amqp://u:p@rabbit.example:5672/warden"
        prefetch = 8
        max_deliveries = 3
        rpc_timeout_s = 1.5
        [gateway]
        host = "0.0.0.0"
        port = 9000
        cors_origins = ["https://a.example", "https://b.example"]
        [auth]
        jwt_secret = "{SECRET}"
        access_token_ttl_s = 60
        """
    )
    settings = load_settings(path, environ={})

    assert settings.source == str(path)
    assert settings.dev is False
    assert (settings.log.level, settings.log.format) == ("debug", "json")
    assert settings.storage.data_dir == tmp_path / "data"
    assert settings.bus.amqp_url == "amqp://u:p@rabbit.example:5672/warden"
    assert (settings.bus.prefetch, settings.bus.max_deliveries) == (8, 3)
    assert settings.bus.rpc_timeout_s == 1.5
    assert (settings.gateway.host, settings.gateway.port) == ("0.0.0.0", 9000)
    assert settings.gateway.cors_origins == ("https://a.example", "https://b.example")
    assert settings.auth.jwt_secret == SECRET
    assert settings.auth.access_token_ttl_s == 60
    assert settings.auth.refresh_token_ttl_s == 7 * 24 * 3600


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(tmp_path / "nope.toml", dev=True, environ={})
    assert "nope.toml" in err.value.message
    assert _error_keys(err) == {"file"}


def test_missing_file_named_by_warden_config_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError):
        load_settings(dev=True, environ={"WARDEN_CONFIG": str(tmp_path / "nope.toml")})


def test_warden_config_names_the_file(write_config: Callable[[str], Path]) -> None:
    path = write_config('[log]\nlevel = "warning"\n')
    settings = load_settings(dev=True, environ={"WARDEN_CONFIG": str(path)})
    assert settings.log.level == "warning"
    assert settings.source == str(path)


def test_default_path_is_under_xdg_config_home(isolated_home: Path) -> None:
    path = isolated_home / ".config" / "warden" / "warden.toml"
    path.parent.mkdir(parents=True)
    path.write_text("[gateway]\nport = 8181\n")
    settings = load_settings(dev=True, environ={})
    assert settings.gateway.port == 8181
    assert settings.source == str(path)


def test_invalid_toml_is_a_config_error(write_config: Callable[[str], Path]) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write_config("[log\nlevel = "), dev=True, environ={})
    assert "TOML" in err.value.message


# --- invalid values name their key ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[bus]\nprefetch = 0", "bus.prefetch"),
        ('[bus]\nprefetch = "many"', "bus.prefetch"),
        ("[bus]\nmax_deliveries = 0", "bus.max_deliveries"),
        ("[bus]\nrpc_timeout_s = 0", "bus.rpc_timeout_s"),
        ("[bus]\nconnect_timeout_s = 0", "bus.connect_timeout_s"),
        ('[bus]\namqp_url = "http://rabbit"', "bus.amqp_url"),
        ('[log]\nlevel = "verbose"', "log.level"),
        ('[log]\nformat = "xml"', "log.format"),
        ('[storage]\ndatabase_url = "mysql://db/warden"', "storage.database_url"),
        ('[storage]\ndata_dir = ""', "storage.data_dir"),
        ("[gateway]\nport = 70000", "gateway.port"),
        ('[gateway]\ncors_origins = "https://a.example"', "gateway.cors_origins"),
        ("[auth]\naccess_token_ttl_s = 1", "auth.access_token_ttl_s"),
        ("[nonsense]\nx = 1", "nonsense"),
        ("[bus]\nprefech = 8", "bus.prefech"),
        ("log = 3", "log"),
    ],
)
def test_invalid_value_names_the_key(
    write_config: Callable[[str], Path], text: str, key: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(text), dev=True, environ={})
    assert key in err.value.details
    assert key in err.value.message


def test_an_error_reads_as_the_docs_say(write_config: Callable[[str], Path]) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write_config("[bus]\nprefetch = 0\n"), dev=True, environ={})
    assert "bus.prefetch: Must be greater than or equal to 1" in err.value.message


def test_every_problem_is_reported_at_once(write_config: Callable[[str], Path]) -> None:
    text = '[bus]\nprefetch = 0\n[log]\nlevel = "loud"\n[gateway]\nport = -1\n'
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(text), environ={})
    assert _error_keys(err) == {"bus.prefetch", "log.level", "gateway.port", "auth.jwt_secret"}


# --- environment overrides --------------------------------------------------------------------


def test_env_overrides_the_file(write_config: Callable[[str], Path]) -> None:
    path = write_config('[bus]\namqp_url = "amqp://file:5672/"\n[gateway]\nport = 9000\n')
    environ = {
        "WARDEN_BUS_AMQP_URL": "amqp://env.example:5672/warden",
        "WARDEN_GATEWAY_PORT": "9100",
        "WARDEN_GATEWAY_CORS_ORIGINS": "https://a.example,https://b.example",
        "WARDEN_AUTH_JWT_SECRET": SECRET,
    }
    settings = load_settings(path, environ=environ)

    assert settings.bus.amqp_url == "amqp://env.example:5672/warden"
    assert settings.gateway.port == 9100
    assert settings.gateway.cors_origins == ("https://a.example", "https://b.example")
    assert settings.auth.jwt_secret == SECRET


def test_env_list_items_are_trimmed_and_empty_ones_dropped() -> None:
    environ = {"WARDEN_GATEWAY_CORS_ORIGINS": "https://a.example, https://b.example,"}
    settings = load_settings(dev=True, environ=environ)
    assert settings.gateway.cors_origins == ("https://a.example", "https://b.example")


def test_env_list_blank_items_are_dropped() -> None:
    environ = {"WARDEN_GATEWAY_CORS_ORIGINS": "https://a.example, "}
    settings = load_settings(dev=True, environ=environ)
    assert settings.gateway.cors_origins == ("https://a.example",)


def test_invalid_env_value_names_the_key() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(dev=True, environ={"WARDEN_GATEWAY_PORT": "eighty"})
    assert _error_keys(err) == {"gateway.port"}


def test_env_dev_flag() -> None:
    assert load_settings(environ={"WARDEN_DEV": "1"}).dev is True
    assert load_settings(environ={"WARDEN_DEV": "true"}).dev is True
    with pytest.raises(ConfigError):
        load_settings(environ={"WARDEN_DEV": "0"})


def test_load_settings_does_not_read_os_environ_for_overrides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("WARDEN_GATEWAY_PORT", "1234")
    assert load_settings(dev=True, environ={}).gateway.port == 8080


# --- the JWT secret ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "secret",
    ["", "change-me", "CHANGEME", "secret", "please-change-me-" + "x" * 40, "short-but-random"],
)
def test_weak_jwt_secret_is_refused_outside_dev(
    write_config: Callable[[str], Path], secret: str
) -> None:
    path = write_config(f'[auth]\njwt_secret = "{secret}"\n')
    with pytest.raises(ConfigError) as err:
        load_settings(path, environ={})
    assert _error_keys(err) == {"auth.jwt_secret"}
    if len(secret) > 10:  # (short ones are words of the message itself)
        assert secret not in err.value.message  # never echo a secret


@pytest.mark.parametrize("secret", ["", "change-me", "short"])
def test_dev_mode_replaces_a_weak_secret_with_a_random_one(
    write_config: Callable[[str], Path], secret: str
) -> None:
    path = write_config(f'[auth]\njwt_secret = "{secret}"\naccess_token_ttl_s = 120\n')
    first = load_settings(path, dev=True, environ={})
    second = load_settings(path, dev=True, environ={})

    assert len(first.auth.jwt_secret) >= MIN_SECRET_LENGTH
    assert first.auth.jwt_secret != secret
    assert first.auth.jwt_secret != second.auth.jwt_secret
    assert first.auth.access_token_ttl_s == 120  # the rest of the section is kept


def test_a_strong_secret_is_kept_in_dev_mode() -> None:
    settings = load_settings(dev=True, environ={"WARDEN_AUTH_JWT_SECRET": SECRET})
    assert settings.auth.jwt_secret == SECRET


def test_secret_is_not_in_the_repr() -> None:
    settings = load_settings(environ={"WARDEN_AUTH_JWT_SECRET": SECRET})
    assert SECRET not in repr(settings)


# --- the template written by `warden init` ----------------------------------------------------


def test_template_is_valid_toml_and_loads(tmp_path: Path) -> None:
    text = render_config_template(tmp_path / "data")
    tomllib.loads(text)
    path = tmp_path / "warden.toml"
    path.write_text(text)

    settings = load_settings(path, environ={})  # not dev: the generated secret is accepted

    assert settings.storage.data_dir == tmp_path / "data"
    assert len(settings.auth.jwt_secret) >= MIN_SECRET_LENGTH
    assert settings.auth.jwt_secret in text


def test_template_generates_a_new_secret_each_time(tmp_path: Path) -> None:
    first = tomllib.loads(render_config_template(tmp_path))["auth"]["jwt_secret"]
    second = tomllib.loads(render_config_template(tmp_path))["auth"]["jwt_secret"]
    assert first != second


def _table_lists(schema: type) -> set[str]:
    """Keys holding arrays of tables: the template shows them as commented examples."""
    return {
        key
        for key, declared in schema().fields.items()
        if isinstance(declared, fields.List) and isinstance(declared.inner, fields.Nested)
    }


def test_template_lists_every_key_of_every_section(tmp_path: Path) -> None:
    text = render_config_template(tmp_path)
    parsed = tomllib.loads(text)
    assert set(parsed) == set(SECTIONS)
    for section, schema in SECTIONS.items():
        tables = _table_lists(schema)
        assert set(parsed[section]) == set(schema().fields) - tables, section
        for key in tables:
            assert f"# [[{section}.{key}]]" in text


def test_template_shows_the_schema_defaults(tmp_path: Path) -> None:
    parsed = tomllib.loads(render_config_template(tmp_path))
    for section, schema in SECTIONS.items():
        for key, schema_field in schema().fields.items():
            if (section, key) in {("storage", "data_dir"), ("auth", "jwt_secret")}:
                continue  # filled in by render_config_template
            if key in _table_lists(schema):
                continue
            default = schema_field.load_default
            default = default() if callable(default) else default
            shown = parsed[section][key]
            if isinstance(schema_field, fields.Nested):  # `[auth.ldap]`: its own keys
                shown = schema_field.schema.load(shown)
            assert shown == default, f"{section}.{key}"


def test_template_defaults_match_the_typed_settings(tmp_path: Path) -> None:
    path = tmp_path / "warden.toml"
    path.write_text(render_config_template(tmp_path / "data"))
    from_template = load_settings(path, environ={})
    defaults = Settings()
    assert from_template.log == defaults.log
    assert from_template.bus == defaults.bus
    assert from_template.gateway == defaults.gateway
    assert from_template.auth.access_token_ttl_s == defaults.auth.access_token_ttl_s
    assert from_template.auth.refresh_token_ttl_s == defaults.auth.refresh_token_ttl_s
    assert from_template.reservations == defaults.reservations
    assert from_template.violations == defaults.violations


def test_template_comments_every_option(tmp_path: Path) -> None:
    lines = render_config_template(tmp_path).splitlines()
    for before, line in itertools.pairwise(lines):
        if re.match(r"^[a-z_]+ = ", line):
            assert before.startswith("# "), line


def test_every_section_table_and_key_says_what_it_is_for() -> None:
    for block in blocks():
        assert block.about, block.name
        for key in block.keys:
            assert key.option.help.endswith("."), f"{block.name}.{key.name}"


def test_template_default_data_dir_follows_xdg(isolated_home: Path) -> None:
    parsed = tomllib.loads(render_config_template())
    assert parsed["storage"]["data_dir"] == str(isolated_home / ".local" / "share" / "warden")


# --- the docs' table of options ----------------------------------------------------------------


def test_docs_table_is_the_generated_one() -> None:
    page = Path(__file__).parents[2] / DOCS_PAGE
    text = page.read_text()
    assert with_options_table(text) == text, (
        f"{DOCS_PAGE}'s table of options differs from the declarations: run `{DOCS_COMMAND}`"
    )


def test_docs_command_rewrites_only_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "configuration.md"
    page.write_text(f"# Intro\n\n{DOCS_BEGIN}\n| stale |\n{DOCS_END}\n\nAfter.\n")
    monkeypatch.setattr(sys, "argv", ["config", "--page", str(page)])
    config_main()
    text = page.read_text()
    assert "| stale |" not in text
    assert text.startswith(f"# Intro\n\n{DOCS_BEGIN}\n| section |")
    assert text.endswith(f"|\n{DOCS_END}\n\nAfter.\n")
    assert "| | `prefetch` | `64` | 1 to 65535 |" in text


def test_a_page_without_the_markers_is_refused() -> None:
    with pytest.raises(ValueError, match="generated"):
        with_options_table("# Warden\n")


# --- database URLs ----------------------------------------------------------------------------


def test_database_url_for_defaults_to_one_sqlite_file_per_service(tmp_path: Path) -> None:
    storage = StorageSettings(data_dir=tmp_path)
    assert storage.database_url_for("reservations") == (
        f"sqlite+aiosqlite:///{tmp_path}/reservations.db"
    )
    assert storage.database_url_for("monitor") != storage.database_url_for("reservations")


def test_database_url_for_replaces_service_placeholder(write_config: Callable[[str], Path]) -> None:
    path = write_config(
        '[storage]\ndatabase_url = "postgresql+asyncpg://warden@db.example/warden_{service}"\n'
    )
    storage = load_settings(path, dev=True, environ={}).storage
    assert storage.database_url_for("jobs") == "postgresql+asyncpg://warden@db.example/warden_jobs"


def test_database_url_without_placeholder_is_shared() -> None:
    storage = StorageSettings(database_url="postgresql+asyncpg://warden@db.example/warden")
    assert storage.database_url_for("jobs") == storage.database_url_for("monitor")
    assert storage.database_url_for("jobs") == "postgresql+asyncpg://warden@db.example/warden"


def test_module_has_no_import_time_state() -> None:
    # Settings are passed down, never read from a module global.
    assert not any(isinstance(v, Settings) for v in vars(config_module).values())
