"""`warden user ...` and the first admin of `warden init`, through `services.cli.main([...])`.

Each test has its own config and SQLite files in its temp dir, HOME and the XDG folders
pointed there, and no WARDEN_* variable from the developer's shell. Passwords are hashed with
real argon2 at cheap parameters.
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.cli import main
from tests.support.config import write_config


@pytest.fixture(autouse=True)
def isolated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cheap_passwords: None
) -> Iterator[None]:
    for name in list(os.environ):
        if name.startswith("WARDEN_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg-data"))
    monkeypatch.setenv("USER", "ada")
    monkeypatch.setenv("LOGNAME", "ada")
    yield


@pytest.fixture
def config(tmp_path: Path) -> Path:
    return write_config(tmp_path / "warden.toml")


@pytest.fixture
def warden(config: Path, capsys: pytest.CaptureFixture[str]) -> Warden:
    return Warden(config, capsys)


class Warden:
    """Runs `warden ARGS --config CONFIG`; returns (exit code, stdout, stderr)."""

    def __init__(self, config: Path, capsys: pytest.CaptureFixture[str]) -> None:
        self.config = config
        self.capsys = capsys

    def __call__(self, *args: str) -> tuple[int, str, str]:
        self.capsys.readouterr()
        code = main([*args, "--config", str(self.config)])
        out, err = self.capsys.readouterr()
        return code, out, err

    def ok(self, *args: str) -> str:
        code, out, err = self(*args)
        assert code == 0, err
        return out


@pytest.fixture
def migrated(warden: Warden) -> Warden:
    warden.ok("db", "upgrade")
    return warden


def users_table(out: str) -> dict[str, list[str]]:
    lines = out.strip().splitlines()
    assert lines[0].split() == ["USERNAME", "EMAIL", "ROLES", "GROUPS"]
    return {line.split()[0]: line.split()[1:] for line in lines[1:]}


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def answer_prompts(monkeypatch: pytest.MonkeyPatch, *answers: str) -> list[str]:
    """Make stdin a terminal whose getpass prompts get `answers`; returns the prompts shown."""
    asked: list[str] = []
    remaining = list(answers)

    def fake_getpass(prompt: str = "Password: ", stream: object = None) -> str:
        asked.append(prompt)
        return remaining.pop(0)

    monkeypatch.setattr("sys.stdin", FakeTerminal())
    monkeypatch.setattr("getpass.getpass", fake_getpass)
    return asked


# --- warden user ------------------------------------------------------------------------------


def test_user_commands_refuse_an_unmigrated_database(warden: Warden) -> None:
    code, _, err = warden("user", "list")

    assert code == 1
    assert err.startswith("warden: ")
    assert "warden db upgrade" in err


def test_add_and_list_users(migrated: Warden, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "a long password")

    assert migrated.ok("user", "add", "alice", "--email", "alice@lab.example") == (
        "created user alice (user; groups: users)\n"
    )
    assert "no users" not in migrated.ok("user", "list")
    migrated.ok("user", "add", "bob", "--email", "b@x.org", "--admin")

    assert users_table(migrated.ok("user", "list")) == {
        "alice": ["alice@lab.example", "user", "users"],
        "bob": ["b@x.org", "user,admin", "users"],
    }


def test_list_with_no_users_says_how_to_add_one(migrated: Warden) -> None:
    assert "warden user add" in migrated.ok("user", "list")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["Alice", "--email", "a@x.org"], "username must be"),
        (["alice", "--email", "nope"], "email must be"),
        (["alice", "--email", "a@x.org", "--group", "phd"], "no group 'phd'"),
    ],
)
def test_add_refuses_bad_input_with_exit_1(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch, args: list[str], message: str
) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "a long password")

    code, _, err = migrated("user", "add", *args)

    assert code == 1
    assert err.startswith("warden: ")
    assert message in err
    assert "no users" in migrated.ok("user", "list")


def test_add_refuses_a_short_password_and_a_duplicate(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "short")
    code, _, err = migrated("user", "add", "alice", "--email", "a@x.org")
    assert code == 1
    assert "password must be at least 8 characters" in err

    monkeypatch.setenv("WARDEN_PASSWORD", "a long password")
    migrated.ok("user", "add", "alice", "--email", "a@x.org")
    code, _, err = migrated("user", "add", "alice", "--email", "a@x.org")
    assert code == 1
    assert "alice exists already" in err


def test_add_without_password_or_terminal_says_what_to_do(migrated: Warden) -> None:
    code, _, err = migrated("user", "add", "alice", "--email", "a@x.org")

    assert code == 1
    assert "set WARDEN_PASSWORD or run on a terminal" in err


def test_add_asks_the_password_twice_on_a_terminal(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = answer_prompts(monkeypatch, "typed twice!", "typed twice!")

    assert "created user alice" in migrated.ok("user", "add", "alice", "--email", "a@x.org")
    assert len(asked) == 2


def test_differing_passwords_change_nothing(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch
) -> None:
    answer_prompts(monkeypatch, "first password", "second password")

    code, _, err = migrated("user", "add", "alice", "--email", "a@x.org")

    assert code == 1
    assert "differ" in err
    assert "no users" in migrated.ok("user", "list")


def test_passwd_sets_a_new_password(migrated: Warden, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "the first one")
    migrated.ok("user", "add", "alice", "--email", "a@x.org")
    monkeypatch.setenv("WARDEN_PASSWORD", "the second one")

    assert migrated.ok("user", "passwd", "alice") == (
        "changed the password of alice (they choose their own at sign-in)\n"
    )

    assert _authenticates(migrated.config, "alice", "the second one")
    assert not _authenticates(migrated.config, "alice", "the first one")


def test_invite_prints_a_link_and_reset_a_new_one(migrated: Warden) -> None:
    out = migrated.ok("user", "invite", "ines", "--email", "ines@x.org")
    assert out.startswith("invited ines: give them this link")
    first = out.strip().splitlines()[-1]
    assert "/password/" in first
    assert "invited" in migrated.ok("user", "list") or "ines" in migrated.ok("user", "list")
    again = migrated.ok("user", "reset", "ines").strip().splitlines()[-1]
    assert "/password/" in again and again != first


def test_deactivate_activate_and_delete(migrated: Warden, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "the first one")
    migrated.ok("user", "add", "alice", "--email", "a@x.org")
    assert migrated.ok("user", "deactivate", "alice").startswith("alice deactivated")
    assert not _authenticates(migrated.config, "alice", "the first one")
    assert migrated.ok("user", "activate", "alice") == "alice activated\n"
    assert _authenticates(migrated.config, "alice", "the first one")
    code, _, err = migrated("user", "delete", "alice")
    assert code == 1 and "--confirm alice" in err
    assert migrated.ok("user", "delete", "alice", "--confirm", "alice") == "alice deleted\n"
    assert "alice" not in migrated.ok("user", "list")


def test_passwd_of_an_unknown_user_fails_before_asking(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = answer_prompts(monkeypatch)

    code, _, err = migrated("user", "passwd", "nobody")

    assert code == 1
    assert "no user 'nobody'" in err
    assert asked == []


def test_promote_and_demote_but_never_the_last_admin(
    migrated: Warden, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WARDEN_PASSWORD", "a long password")
    migrated.ok("user", "add", "alice", "--email", "a@x.org", "--admin")
    migrated.ok("user", "add", "bob", "--email", "b@x.org")

    code, _, err = migrated("user", "demote", "alice")
    assert code == 1
    assert "last admin" in err

    assert migrated.ok("user", "promote", "bob") == "bob is now an admin\n"
    assert "already" in migrated.ok("user", "promote", "bob")
    assert migrated.ok("user", "demote", "alice") == "alice is no longer an admin\n"
    assert "not an admin" in migrated.ok("user", "demote", "alice")
    assert users_table(migrated.ok("user", "list"))["bob"][1] == "user,admin"
    assert users_table(migrated.ok("user", "list"))["alice"][1] == "user"

    code, _, err = migrated("user", "promote", "carol")
    assert code == 1
    assert "no user 'carol'" in err


# --- warden init: the first admin -------------------------------------------------------------


def test_init_migrates_and_creates_the_first_admin_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "etc" / "warden.toml"
    monkeypatch.setenv("WARDEN_ADMIN_PASSWORD", "admin password")

    assert main(["init", "--config", str(path), "--data-dir", str(tmp_path / "data")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {path}" in out
    assert "reservations: at reservations_" in out
    assert "created the first admin ada (user, admin; groups: users)" in out
    assert "warden run all" in out

    # Again: keeps the file, migrates (nothing to do) and does not make a second admin.
    assert main(["init", "--config", str(path), "--admin-user", "eve"]) == 0
    out = capsys.readouterr().out
    assert "keeping it" in out
    assert "an admin exists already" in out

    assert main(["user", "list", "--config", str(path)]) == 0
    assert users_table(capsys.readouterr().out) == {"ada": ["ada@localhost", "user,admin", "users"]}
    assert _authenticates(path, "ada", "admin password")


def test_init_takes_the_admin_name_and_email_given(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warden.toml"
    monkeypatch.setenv("WARDEN_ADMIN_PASSWORD", "admin password")

    args = ["init", "--config", str(path), "--admin-user", "root_", "--admin-email", "r@x.org"]
    assert main(args) == 0

    assert "created the first admin root_" in capsys.readouterr().out
    assert main(["user", "list", "--config", str(path)]) == 0
    assert users_table(capsys.readouterr().out)["root_"][0] == "r@x.org"


def test_init_without_a_password_prints_how_to_add_an_admin(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "warden.toml"

    assert main(["init", "--config", str(path)]) == 0

    out = capsys.readouterr().out
    assert "no admin yet: `warden run all` prints a one-time set-up link" in out
    assert "`warden user add NAME --email E --admin`" in out
    assert main(["user", "list", "--config", str(path)]) == 0
    assert "no users" in capsys.readouterr().out


def test_init_asks_the_admin_password_on_a_terminal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = answer_prompts(monkeypatch, "admin password", "admin password")

    assert main(["init", "--config", str(tmp_path / "warden.toml")]) == 0

    assert "created the first admin ada" in capsys.readouterr().out
    assert "ada" in asked[0]


def test_init_on_a_terminal_leaves_the_admin_to_the_set_up_link_on_an_empty_answer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    asked = answer_prompts(monkeypatch, "")

    assert main(["init", "--config", str(tmp_path / "warden.toml")]) == 0

    assert "no admin yet: `warden run all` prints a one-time set-up link" in capsys.readouterr().out
    assert len(asked) == 1
    assert "empty: create the admin later in the browser" in asked[0]


# --- warden setup-link ------------------------------------------------------------------------


def test_setup_link_prints_a_new_link_each_time_until_an_admin_exists(migrated: Warden) -> None:
    import asyncio

    from services.accounts import setup_tokens as setup
    from services.reservations.store import Store
    from services.shared.config import load_settings
    from services.shared.storage import db

    first, second = migrated.ok("setup-link").strip(), migrated.ok("setup-link").strip()
    assert first.startswith("http://127.0.0.1:8080/setup?token=")
    assert second.startswith("http://127.0.0.1:8080/setup?token=") and second != first
    token = first.rpartition("token=")[2]

    async def use(token: str) -> None:
        settings = load_settings(migrated.config)
        engine = db.create_engine(settings.storage.database_url_for("reservations"))
        try:
            async with Store(engine).write() as conn:
                await setup.create_first_admin(
                    conn, token=token, username="root1", email="r@x.org", password="long enough"
                )
        finally:
            await engine.dispose()

    asyncio.run(use(token))  # the printed token is one the service takes
    assert users_table(migrated.ok("user", "list"))["root1"][1] == "user,admin"

    code, out, err = migrated("setup-link")
    assert code == 1
    assert out == ""
    assert "an admin exists already" in err


def test_init_with_an_invalid_admin_name_says_how_to_choose_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("USER", "Ada Lovelace")
    monkeypatch.setenv("LOGNAME", "Ada Lovelace")
    monkeypatch.setenv("WARDEN_ADMIN_PASSWORD", "admin password")

    assert main(["init", "--config", str(tmp_path / "warden.toml")]) == 1

    err = capsys.readouterr().err
    assert "username must be" in err
    assert "--admin-user" in err


# --- helpers ----------------------------------------------------------------------------------


def _authenticates(config: Path, username: str, password: str) -> bool:
    import asyncio

    from services.accounts import users as accounts
    from services.reservations.store import Store
    from services.shared.config import load_settings
    from services.shared.errors import AuthenticationFailed, Forbidden
    from services.shared.storage import db

    settings = load_settings(config)

    async def check() -> bool:
        engine = db.create_engine(settings.storage.database_url_for("reservations"))
        try:
            async with Store(engine).read() as conn:
                await accounts.authenticate(conn, username, password)
            return True
        except (AuthenticationFailed, Forbidden):  # Forbidden: deactivated
            return False
        finally:
            await engine.dispose()

    return asyncio.run(check())
