"""POST /inventory/hosts/{name}/user-key: whether Warden's key logs in to a host as a user (what
jobs and terminal warnings need), tried against a real OpenSSH sshd on loopback where that
user's keys come from their own ~/.ssh/authorized_keys. Needs root to create the Unix users.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from tests.e2e.api import ApiSystem, running_system
from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser

pytestmark = [
    pytest.mark.asyncio(loop_scope="module"),
    pytest.mark.timeout(240),
    pytest.mark.skipif(os.geteuid() != 0, reason="creating a Unix user needs root"),
]

HOST = "real-sshd"


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory, real_host: Sshd
) -> AsyncIterator[ApiSystem]:
    async with running_system(tmp_path_factory.mktemp("user-key"), hosts=1, gpus=1) as running:
        admin = await running.as_user("admin")
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
        yield running


def _install_key(person: UnixUser, line: str) -> None:
    ssh = person.home / ".ssh"
    ssh.mkdir(mode=0o700, exist_ok=True)
    keys = ssh / "authorized_keys"
    keys.write_text(line + "\n")
    for path in (ssh, keys):
        os.chown(path, person.uid, person.gid)
    keys.chmod(0o600)


async def test_only_admins_may_check_and_bad_input_is_refused(system: ApiSystem) -> None:
    user = await system.as_user("alice")
    refused = await user.post(f"/inventory/hosts/{HOST}/user-key", {})
    assert refused.status == 403, refused.body
    admin = await system.as_user("admin")
    bad = await admin.post(f"/inventory/hosts/{HOST}/user-key", {"username": "Not A Name"})
    assert bad.status == 422 and "username" in bad.body["details"]["errors"], bad.body
    nowhere = await admin.post("/inventory/hosts/no-such-host/user-key", {"username": "alice"})
    assert nowhere.status == 404, nowhere.body


async def test_a_user_without_the_key_and_an_unknown_user_are_told_apart(
    system: ApiSystem, person: UnixUser
) -> None:
    admin = await system.as_user("admin")
    missing = await admin.post(f"/inventory/hosts/{HOST}/user-key", {"username": person.name})
    assert missing.status == 200, missing.body
    assert missing.body["proven"] is False
    assert missing.body["outcome"] == "key_not_installed"
    assert "authorized_keys" in missing.body["reason"]
    nobody = f"nobody{uuid.uuid4().hex[:8]}"
    unknown = await admin.post(f"/inventory/hosts/{HOST}/user-key", {"username": nobody})
    assert unknown.body["outcome"] == "unknown_user", unknown.body


async def test_once_the_user_adds_wardens_key_it_works(system: ApiSystem, person: UnixUser) -> None:
    admin = await system.as_user("admin")
    key = await system.anonymous().get("/ssh-key")
    _install_key(person, key.body["public_key"])
    works = await admin.post(f"/inventory/hosts/{HOST}/user-key", {"username": person.name})
    assert works.status == 200, works.body
    assert works.body["proven"] is True and works.body["outcome"] == "proven"
    assert works.body["host"] == HOST
