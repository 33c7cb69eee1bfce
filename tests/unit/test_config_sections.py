"""Settings of the [violations] and [ssh] sections, keys that moved to [ssh], and nested tables,
from the file and from the environment.
"""
# ruff: noqa: F811 (the imported fixtures `isolated_home`, `write_config` are tests' parameters)

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from services.shared.config import (
    load_settings,
)
from services.shared.errors import ConfigError
from tests.unit.test_config import (
    SECRET,
    _error_keys,
    isolated_home,  # noqa: F401 (a fixture)
    write_config,  # noqa: F401 (a fixture)
)

# --- violations --------------------------------------------------------------------------------


def test_violation_steps_allowlist_webhooks_and_overrides_are_read(
    write_config: Callable[[str], Path],
) -> None:
    path = write_config(
        f"""
[auth]
jwt_secret = "{SECRET}"
[violations]
mode = "strict"
allow = ["root:Xorg", "*:dcgm*"]
steps = ["0s webhook owner+admins", "90s terminate", "2m kill"]
smtp_host = "smtp.lab.example"
smtp_username = "warden"
smtp_password = "hunter2"
[[violations.webhooks]]
url = "https://hooks.slack.com/services/T/B/X"
[[violations.webhooks]]
url = "http://127.0.0.1:9000/hook"
format = "json"
secret = "s3"
name = "audit"
[[violations.overrides]]
hosts = ["dgx*"]
steps = ["0s kill"]
"""
    )
    violations = load_settings(path, environ={}).violations
    assert violations.mode == "strict"
    assert violations.allow == (("root", "Xorg"), ("*", "dcgm*"))
    assert [(s.after_s, s.action, s.recipients) for s in violations.steps] == [
        (0.0, "webhook", ("owner", "admins")),
        (90.0, "terminate", ()),
        (120.0, "kill", ()),
    ]
    assert [w.label for w in violations.webhooks] == ["slack", "audit"]
    assert [s.text for s in violations.steps_for("dgx3")] == ["0s kill"]
    assert violations.steps_for("node1") == violations.steps
    assert "hunter2" not in repr(violations) and "hooks.slack" not in repr(violations)


@pytest.mark.parametrize(
    ("toml", "key", "reason"),
    [
        ('steps = ["soon email admins"]', "violations.steps[0]", "is not"),
        ('steps = ["60s email bosses"]', "violations.steps[0]", "unknown recipient"),
        ('steps = ["60s email", "0s kill"]', "violations.steps", "in order"),
        ('allow = ["Xorg"]', "violations.allow[0]", "user:command"),
        ('mode = "paranoid"', "violations.mode", "Must be one of"),
        ('smtp_password = "x"', "violations.smtp_password", "smtp_username"),
        ('[[violations.webhooks]]\nurl = "ftp://x"', "violations.webhooks.0.url", "URL"),
    ],
)
def test_bad_violation_settings_name_the_key(
    write_config: Callable[[str], Path], toml: str, key: str, reason: str
) -> None:
    header = "[violations]\n" if not toml.startswith("[[") else ""
    path = write_config(f'[auth]\njwt_secret = "{SECRET}"\n{header}{toml}\n')
    with pytest.raises(ConfigError) as caught:
        load_settings(path, environ={})
    assert key in caught.value.details, caught.value.details
    assert reason in caught.value.details[key]


def test_a_handler_listed_twice_runs_once(write_config: Callable[[str], Path]) -> None:
    path = write_config('[violations]\nhandlers = ["kill", "email", "kill"]\n')
    assert load_settings(path, dev=True, environ={}).violations.handlers == ("kill", "email")


def test_violation_lists_come_from_the_environment_too() -> None:
    settings = load_settings(
        environ={
            "WARDEN_DEV": "1",
            "WARDEN_VIOLATIONS_STEPS": "0s terminal offender, 30s kill",
            "WARDEN_VIOLATIONS_SMTP_PASSWORD": "pw",
            "WARDEN_VIOLATIONS_SMTP_USERNAME": "me",
        }
    )
    assert [s.text for s in settings.violations.steps] == ["0s terminal offender", "30s kill"]
    assert settings.violations.smtp.password == "pw"


# --- the [ssh] section, and keys that moved there -----------------------------------------------


def test_ssh_settings_are_read(write_config: Callable[[str], Path], tmp_path: Path) -> None:
    path = write_config(
        f"""
        [ssh]
        known_hosts = "{tmp_path / "kh"}"
        accept_new_host_keys = true
        connect_timeout_s = 3.5
        keepalive_s = 7
        key_file = "/keys/warden_users"
        """
    )
    ssh = load_settings(path, dev=True, environ={}).ssh
    assert ssh.known_hosts == str(tmp_path / "kh")
    assert ssh.accept_new_host_keys is True
    assert (ssh.connect_timeout_s, ssh.keepalive_s) == (3.5, 7.0)
    assert ssh.key_file == "/keys/warden_users"


@pytest.mark.parametrize(
    ("text", "old", "new"),
    [
        ('[monitor]\nknown_hosts = "/k"\n', "monitor.known_hosts", "known_hosts in [ssh]"),
        ("[monitor]\nkeepalive_s = 3\n", "monitor.keepalive_s", "keepalive_s in [ssh]"),
        ("[monitor]\nconnect_timeout_s = 3\n", "monitor.connect_timeout_s", "[ssh]"),
        ("[monitor]\naccept_new_host_keys = true\n", "monitor.accept_new_host_keys", "[ssh]"),
        ('[jobs]\nssh_key_file = "/k"\n', "jobs.ssh_key_file", "key_file in [ssh]"),
        ('[violations]\nssh_key_file = "/k"\n', "violations.ssh_key_file", "key_file in [ssh]"),
    ],
)
def test_a_key_that_moved_to_ssh_is_refused_naming_its_new_place(
    write_config: Callable[[str], Path], text: str, old: str, new: str
) -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(write_config(text), dev=True, environ={})
    assert _error_keys(err) == {old}
    assert new in err.value.details[old]
    assert "moved" in err.value.message


def test_a_moved_key_in_the_environment_is_refused_naming_the_new_variable() -> None:
    with pytest.raises(ConfigError) as err:
        load_settings(dev=True, environ={"WARDEN_JOBS_SSH_KEY_FILE": "/k"})
    assert "WARDEN_SSH_KEY_FILE" in err.value.details["jobs.ssh_key_file"]


def test_a_nested_table_loads_from_the_file_and_the_environment(tmp_path: Path) -> None:
    path = tmp_path / "warden.toml"
    path.write_text(
        '[auth.ldap]\nurl = "ldaps://ldap.lab.example"\nbind_dn = "cn=warden,dc=lab"\n'
        'group_map = ["cn=ml,ou=groups,dc=lab -> ml-team"]\n'
    )
    environ = {"WARDEN_AUTH_LDAP_BIND_PASSWORD": "s3cret", "WARDEN_AUTH_LDAP_TIMEOUT_S": "2"}
    ldap = load_settings(path, dev=True, environ=environ).auth.ldap
    assert (ldap.url, ldap.bind_dn, ldap.bind_password) == (
        "ldaps://ldap.lab.example",
        "cn=warden,dc=lab",
        "s3cret",
    )
    assert ldap.timeout_s == 2
    assert [(m.dn, m.group) for m in ldap.group_map] == [("cn=ml,ou=groups,dc=lab", "ml-team")]
    assert "s3cret" not in repr(ldap)


def test_a_nested_table_names_its_bad_keys(tmp_path: Path) -> None:
    path = tmp_path / "warden.toml"
    path.write_text('[auth.ldap]\nurl = "http://ldap"\ngroup_map = ["no arrow"]\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(path, dev=True, environ={})
    assert "auth.ldap.url" in raised.value.details
    path.write_text('[auth.ldap]\ngroup_map = ["no arrow"]\n')
    with pytest.raises(ConfigError) as raised:
        load_settings(path, dev=True, environ={})
    assert "auth.ldap.group_map[0]" in raised.value.details
