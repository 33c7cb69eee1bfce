"""Self-signup by SSH key through the API, proven against a real OpenSSH sshd.

The embedded system (every service and the gateway, `[auth] ssh_signup = true`) gets one more
host through the inventory API: a real sshd on loopback (tests/support/sshd.py), where Warden's
management login is one throwaway Unix user and another Unix user's keys are read from its own
~/.ssh/authorized_keys, as on a real host. First a system where signup is off; then, in order
on one system: the refusals, the signup that works, the host going down, the address limit
(set low).
Needs root to create the Unix user.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import pytest_asyncio

from tests.e2e.api import ApiClient, ApiSystem, running_system
from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="creating a Unix user needs root"),
]

HOST = "real-sshd"
FAILURES_PER_IP = 8
PASSWORD = "signup-pw-12345678"
EXTRA_GROUP = "signed-up"


@dataclass
class Signup:
    system: ApiSystem
    sshd: Sshd
    person: UnixUser

    @property
    def anonymous(self) -> ApiClient:
        return self.system.anonymous()

    def form(self, username: str | None = None, **changes: object) -> dict[str, object]:
        name = username or self.person.name
        return {
            "username": name,
            "email": f"{name}@example.org",
            "password": PASSWORD,
            "host": HOST,
            **changes,
        }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def signup(
    tmp_path_factory: pytest.TempPathFactory, real_host: Sshd, person: UnixUser
) -> AsyncIterator[Signup]:
    config = {
        "auth": {"ssh_signup": True, "ssh_signup_groups": [EXTRA_GROUP]},
        "gateway": {"login_failures_per_ip": FAILURES_PER_IP},
    }
    async with running_system(
        tmp_path_factory.mktemp("api-signup"), hosts=1, gpus=1, config=config
    ) as system:
        admin = await system.as_user("admin")
        host = real_host.host_config(HOST)
        added = await admin.post(
            "/inventory/hosts",
            {
                "name": HOST,
                "address": host.address,
                "port": host.port,
                "user": host.user,
                "key_file": host.key_file,
                "host_key": real_host.host_public_key,
            },
        )
        assert added.status == 201, added.body
        group = await admin.post("/groups", {"name": EXTRA_GROUP})
        assert group.status == 201, group.body
        yield Signup(system, real_host, person)


def _install_key(person: UnixUser, line: str) -> None:
    ssh = person.home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    keys = ssh / "authorized_keys"
    keys.write_text(line + "\n")
    for path in (ssh, keys):
        os.chown(path, person.uid, person.gid)
    keys.chmod(0o600)


def _reason(answer: object) -> str:
    assert isinstance(answer, dict)
    return str(answer["details"]["reason"])


async def test_signup_is_refused_where_it_is_not_enabled(tmp_path: Path) -> None:
    async with running_system(tmp_path, hosts=1, gpus=1) as system:
        state = await system.anonymous().get("/signup")
        assert state.status == 200 and state.body == {
            "enabled": False,
            "public_key": None,
            "hosts": [],
        }
        answer = await system.anonymous().post(
            "/signup", {"username": "carol", "email": "carol@example.org", "password": PASSWORD}
        )
        assert answer.status == 403, answer.body
        assert "not enabled" in answer.body["message"]


async def test_the_signup_page_shows_the_key_and_the_hosts(signup: Signup) -> None:
    answer = await signup.anonymous.get("/signup")
    assert answer.status == 200, answer.body
    assert answer.body["enabled"] is True
    key = await signup.anonymous.get("/ssh-key")
    assert answer.body["public_key"] == key.body["public_key"]
    assert HOST in answer.body["hosts"]


async def test_a_key_not_installed_is_refused_with_the_reason(signup: Signup) -> None:
    answer = await signup.anonymous.post("/signup", signup.form())
    assert answer.status == 403, answer.body
    assert _reason(answer.body) == "key_not_installed", answer.body
    assert "authorized_keys" in answer.body["message"]
    login = await signup.anonymous.post(
        "/session", {"username": signup.person.name, "password": PASSWORD}
    )
    assert login.status == 401  # no account was made


async def test_an_unknown_unix_user_is_refused_with_the_reason(signup: Signup) -> None:
    nobody = f"nobody{uuid.uuid4().hex[:8]}"
    answer = await signup.anonymous.post("/signup", signup.form(nobody))
    assert answer.status == 403, answer.body
    assert _reason(answer.body) == "unknown_user", answer.body
    assert nobody in answer.body["message"]


async def test_bad_fields_taken_names_and_unknown_hosts_are_refused(signup: Signup) -> None:
    bad = await signup.anonymous.post("/signup", signup.form("Not A Name", email="nope"))
    assert bad.status == 422, bad.body
    assert {"username", "email"} <= set(bad.body["details"]["errors"])
    taken = await signup.anonymous.post("/signup", signup.form("alice"))
    assert taken.status == 409, taken.body
    nowhere = await signup.anonymous.post("/signup", signup.form(host="no-such-host"))
    assert nowhere.status == 422, nowhere.body
    assert "host" in nowhere.body["details"]["errors"]
    management = await signup.anonymous.post("/signup", signup.form(signup.sshd.user))
    # The management login's own account is refused without logging in as it.
    assert management.status == 403, management.body
    assert _reason(management.body) == "refused"


async def test_with_the_key_installed_the_account_is_made_and_signs_in(signup: Signup) -> None:
    key = (await signup.anonymous.get("/signup")).body["public_key"]
    _install_key(signup.person, key)
    logins_before = signup.sshd.accepted_logins()
    answer = await signup.anonymous.post("/signup", signup.form())
    assert answer.status == 201, answer.body
    assert answer.body["user"]["username"] == signup.person.name
    assert answer.body["user"]["roles"] == ["user"]
    # Every default group (`users`, made with the database) and [auth] ssh_signup_groups.
    assert set(answer.body["user"]["groups"]) == {"users", EXTRA_GROUP}
    assert signup.sshd.accepted_logins() > logins_before
    assert f"Accepted publickey for {signup.person.name}" in signup.sshd.log()
    me = await ApiClient(
        signup.system.base, signup.system.session, answer.body["access_token"]
    ).get("/me")
    assert me.status == 200 and me.body["user"]["username"] == signup.person.name
    login = await signup.anonymous.post(
        "/session", {"username": signup.person.name, "password": PASSWORD}
    )
    assert login.status == 201, login.body
    again = await signup.anonymous.post("/signup", signup.form())
    assert again.status == 409, again.body


async def test_a_host_that_is_down_is_named(signup: Signup, tmp_path: Path) -> None:
    signup.sshd.stop()
    try:
        answer = await signup.anonymous.post("/signup", signup.form(f"late{uuid.uuid4().hex[:6]}"))
    finally:
        signup.sshd.start()
    assert answer.status == 503, answer.body
    assert _reason(answer.body) == "unreachable"
    assert HOST in answer.body["message"]


async def test_failed_attempts_are_limited_per_address(signup: Signup) -> None:
    answers = []
    for _ in range(FAILURES_PER_IP + 1):
        answer = await signup.anonymous.post(
            "/signup", signup.form(f"nobody{uuid.uuid4().hex[:8]}")
        )
        answers.append(answer.status)
        if answer.status == 429:
            assert int(answer.headers["Retry-After"]) >= 1
            break
    assert answers[-1] == 429, answers
    assert set(answers[:-1]) <= {403, 503}
