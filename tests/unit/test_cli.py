"""The `warden` command, called in-process through `services.cli.main([...])`.

Every test runs with HOME and the XDG folders pointed at its own temp dir and with no
WARDEN_* variable from the developer's shell, so nothing reads or writes the real home.
Nothing here needs a server: the commands that would run services are refused before that.
"""

from __future__ import annotations

import logging
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from services import __version__
from services.cli import main
from services.shared.config import MIN_SECRET_LENGTH, load_settings
from tests.support.ports import free_port


@pytest.fixture(autouse=True)
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    return home


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    """`warden run` / `warden db` configure the root logger; undo it for the next test."""
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    noisy = {name: logging.getLogger(name).level for name in ("aiormq", "aio_pika", "alembic")}
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        for name, old in noisy.items():
            logging.getLogger(name).setLevel(old)


@pytest.fixture
def config_path(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    """A config written by `warden init` (valid: it holds a generated secret)."""
    path = tmp_path / "etc" / "warden.toml"
    assert main(["init", "--config", str(path)]) == 0
    capsys.readouterr()
    return path


def write_config(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(text)
    return path


# --- warden init ------------------------------------------------------------------------------


def test_init_writes_a_private_config_that_loads(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "warden.toml"

    assert main(["init", "--config", str(path)]) == 0

    out = capsys.readouterr().out
    assert f"wrote {path}" in out
    assert "warden db upgrade" in out  # says what to do next
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # it holds the JWT secret
    settings = load_settings(path, environ={})
    assert settings.source == str(path)
    assert not settings.dev
    assert len(settings.auth.jwt_secret) >= MIN_SECRET_LENGTH
    # The default data dir follows XDG_DATA_HOME, and init creates it.
    assert settings.storage.data_dir == tmp_path / "xdg-data" / "warden"
    assert settings.storage.data_dir.is_dir()


def test_init_writes_the_data_dir_it_is_given(tmp_path: Path) -> None:
    path, data_dir = tmp_path / "warden.toml", tmp_path / "data"

    assert main(["init", "--config", str(path), "--data-dir", str(data_dir)]) == 0

    assert load_settings(path, environ={}).storage.data_dir == data_dir
    assert data_dir.is_dir()


def test_init_without_config_writes_under_xdg_config_home(tmp_path: Path) -> None:
    assert main(["init"]) == 0

    path = tmp_path / "xdg-config" / "warden" / "warden.toml"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_settings(environ={"XDG_CONFIG_HOME": str(tmp_path / "xdg-config")}).source == (
        str(path)
    )
    assert not any((tmp_path / "home").iterdir())  # nothing in HOME


def test_init_generates_a_new_secret_each_time(tmp_path: Path) -> None:
    first, second = tmp_path / "a.toml", tmp_path / "b.toml"
    assert main(["init", "--config", str(first)]) == 0
    assert main(["init", "--config", str(second)]) == 0

    secrets = {load_settings(p, environ={}).auth.jwt_secret for p in (first, second)}
    assert len(secrets) == 2


def test_init_keeps_an_existing_config_without_force(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config_path.write_text(config_path.read_text() + "\n# edited by the admin\n")
    before = config_path.read_text()

    assert main(["init", "--config", str(config_path)]) == 0

    assert config_path.read_text() == before
    assert "--force" in capsys.readouterr().out


def test_init_force_overwrites_and_keeps_the_file_private(config_path: Path) -> None:
    config_path.chmod(0o644)
    old_secret = load_settings(config_path, environ={}).auth.jwt_secret
    config_path.write_text(config_path.read_text() + "\n# edited by the admin\n")

    assert main(["init", "--config", str(config_path), "--force"]) == 0

    assert "edited by the admin" not in config_path.read_text()
    assert stat.S_IMODE(config_path.stat().st_mode) == 0o600
    assert load_settings(config_path, environ={}).auth.jwt_secret != old_secret


# --- warden run -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "services",
    [["jobs"], ["monitor", "gateway"], ["reservations", "jobs", "violations", "monitor"]],
    ids=["one", "two", "all-but-gateway"],
)
def test_run_refuses_some_services_on_the_inprocess_bus(
    config_path: Path, services: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["run", *services, "--bus", "inproc", "--config", str(config_path)])

    assert code == 1
    err = capsys.readouterr().err
    assert err.startswith("warden: ")
    assert "--bus amqp" in err
    assert "warden run all" in err


def test_config_option_is_accepted_before_the_command(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--config", str(config_path), "run", "jobs", "--bus", "inproc"]) == 1
    assert "--bus amqp" in capsys.readouterr().err


# --- invalid configuration -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ('[bus]\namqp_url = "http://rabbit"\n', "bus.amqp_url"),
        ("[bus]\nprefetch = 0\n", "bus.prefetch"),
        ('[gateway]\nport = "eighty"\n', "gateway.port"),
        ('[log]\nlevel = "loud"\n', "log.level"),
        ("[log]\ncolour = true\n", "log.colour"),
        ("[logging]\nlevel = 'info'\n", "logging"),
        ('[storage]\ndatabase_url = "mysql://db/warden"\n', "storage.database_url"),
        ('[auth]\njwt_secret = "change-me"\n', "auth.jwt_secret"),
        ("", "auth.jwt_secret"),
    ],
    ids=[
        "amqp-url",
        "prefetch",
        "port",
        "log-level",
        "unknown-key",
        "unknown-section",
        "database-url",
        "placeholder-secret",
        "missing-secret",
    ],
)
@pytest.mark.parametrize(
    "command",
    [["run", "all"], ["run", "jobs"], ["db", "upgrade"], ["db", "current"]],
    ids=["run-all", "run-one", "db-upgrade", "db-current"],
)
def test_invalid_config_exits_2_naming_the_key(
    tmp_path: Path,
    text: str,
    key: str,
    command: list[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    path = write_config(tmp_path, text)

    assert main([*command, "--config", str(path)]) == 2

    err = capsys.readouterr().err
    assert f"{key}:" in err
    assert str(path) in err
    assert not (tmp_path / "xdg-data").exists()  # refused before touching any data


def test_invalid_environment_override_names_the_key(
    config_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("WARDEN_GATEWAY_PORT", "70000")

    assert main(["run", "all", "--config", str(config_path)]) == 2

    assert "gateway.port:" in capsys.readouterr().err


def test_not_toml_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_config(tmp_path, "[bus\nprefetch = \n")

    assert main(["run", "all", "--config", str(path)]) == 2

    assert "not valid TOML" in capsys.readouterr().err


def test_missing_explicit_config_exits_2_and_says_how_to_create_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nowhere.toml"

    assert main(["run", "all", "--config", str(missing)]) == 2

    err = capsys.readouterr().err
    assert str(missing) in err
    assert "warden init" in err


def test_dev_accepts_a_missing_secret_but_not_other_mistakes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_config(tmp_path, "[bus]\nprefetch = 0\n")

    assert main(["db", "current", "--dev", "--config", str(path)]) == 2

    err = capsys.readouterr().err
    assert "bus.prefetch:" in err
    assert "auth.jwt_secret" not in err


# --- warden db / version ----------------------------------------------------------------------


def test_db_with_an_unknown_service_exits_1(
    config_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["db", "upgrade", "gateway", "--config", str(config_path)]) == 1

    err = capsys.readouterr().err
    assert "no database for gateway" in err
    assert "reservations" in err  # lists the services that have one


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out.strip() == f"warden {__version__}"


def test_version_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert __version__ in capsys.readouterr().out


def test_unknown_service_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "scheduler"])
    assert exited.value.code == 2
    assert "scheduler" in capsys.readouterr().err


@pytest.mark.parametrize("wait", ["-1", "soon", "inf", "nan"])
def test_a_connect_wait_that_is_no_number_of_seconds_is_a_usage_error(
    wait: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["run", "all", "--connect-wait", wait])
    assert exited.value.code == 2
    assert "--connect-wait" in capsys.readouterr().err


# --- regressions (bugs found while writing these tests) ---------------------------------------


def test_init_writes_where_warden_config_points(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "warden.toml"
    monkeypatch.setenv("WARDEN_CONFIG", str(path))

    assert main(["init"]) == 0

    assert path.exists()
    assert main(["db", "current"]) == 0  # finds the file init wrote


def test_init_data_dir_with_toml_special_characters_round_trips(tmp_path: Path) -> None:
    path, data_dir = tmp_path / "warden.toml", tmp_path / 'odd\\name "dir"'

    assert main(["init", "--config", str(path), "--data-dir", str(data_dir)]) == 0

    assert load_settings(path, environ={}).storage.data_dir == data_dir


def test_sim_ctl_start_process_keeps_its_command_apart_from_wardens(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """`--command` once overwrote `warden`'s own sub-command (KeyError 'python x.py')."""
    from services.cli import build_parser
    from services.sim.cli import _ctl_request

    argv = ["sim", "ctl", "start-process", "--host", "sim-001", "--gpu", "0,1"]
    argv += ["--user", "alice", "--command", "python x.py"]
    args = build_parser().parse_args([*argv, "--memory-mib", "512"])
    assert args.command == "sim"
    assert _ctl_request(args) == (
        "POST",
        "/hosts/sim-001/processes",
        {"gpu": [0, 1], "user": "alice", "command": "python x.py", "used_memory_mib": 512},
    )
    # Through `main`: nothing listens on the port, so it says so (not a KeyError).
    assert main([*argv, "--control-port", str(free_port())]) == 1
    assert "cannot reach the control API" in capsys.readouterr().err


@pytest.mark.parametrize(
    "variable",
    ["WARDEN_BUS_PREFETCH=0", "WARDEN_MONITOR_KNOWN_HOSTS=/etc/ssh/ssh_known_hosts"],
    ids=["bad-value", "moved-key"],
)
def test_config_problems_are_printed_one_per_line(
    config_path: Path,
    variable: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    name, value = variable.split("=", 1)
    monkeypatch.setenv(name, value)

    assert main(["db", "upgrade", "--config", str(config_path)]) == 2

    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == f"warden: invalid configuration ({config_path}):"
    assert len(lines) == 2 and lines[1].startswith("  ") and "\\n" not in lines[1]
