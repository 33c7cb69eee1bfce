"""LDAP sign-in through the API against a real OpenLDAP server (slapd) started for the module:
first sign-in creates the account with its directory e-mail, role and mapped groups, later ones
bring them up to date; a wrong password and an unknown name get the same 401; a user outside
the allowed groups gets a 403 naming them; an unreachable directory or a refused service
account gets a 503 saying which; local accounts still sign in with their own passwords.

One embedded system for the module (every service and the gateway, as `warden run all`).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Iterator

import pytest
import pytest_asyncio

from tests.e2e.api import PASSWORD, ApiSystem, Response, running_system
from tests.support.slapd import (
    GROUPS_DN,
    PEOPLE,
    SERVICE_DN,
    SERVICE_PASSWORD,
    Slapd,
    group_dn,
    password_of,
    running_slapd,
    user_dn,
)

pytestmark = [pytest.mark.asyncio(loop_scope="module"), pytest.mark.timeout(240)]


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    with running_slapd(tmp_path_factory.mktemp("slapd")) as server:
        yield server


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def system(
    tmp_path_factory: pytest.TempPathFactory, slapd: Slapd
) -> AsyncIterator[ApiSystem]:
    ldap = {
        "url": slapd.url,
        "bind_dn": SERVICE_DN,
        "bind_password": SERVICE_PASSWORD,
        "user_base_dn": PEOPLE,
        "user_filter": "(&(objectClass=inetOrgPerson)(uid={username}))",
        "group_base_dn": GROUPS_DN,
        "group_filter": "(member={dn})",
        # Written with other case and spaces: DNs compare as the directory does.
        "allowed_groups": ["CN=gpu-users, OU=groups, DC=lab, DC=example"],
        "admin_groups": [group_dn("warden-admins")],
        "group_map": [f"{group_dn('ml')} -> ml-team"],
        "timeout_s": 3,
    }
    config = {"auth": {"ldap": ldap}}
    async with running_system(tmp_path_factory.mktemp("api-ldap"), config=config) as system:
        yield system


async def sign_in(system: ApiSystem, username: str, password: str) -> Response:
    return await system.anonymous().post("/session", {"username": username, "password": password})


async def account(system: ApiSystem, username: str) -> dict:
    admin = await system.as_user("admin")
    answer = await admin.get(f"/users/{username}")
    assert answer.status == 200, answer.body
    return dict(answer.body)


async def test_the_sign_in_page_learns_that_directory_accounts_may_sign_in(
    system: ApiSystem,
) -> None:
    answer = await system.anonymous().get("/auth/methods")
    assert answer.status == 200
    assert answer.body == {"ldap": True}


async def test_first_sign_in_creates_the_account_from_the_directory(system: ApiSystem) -> None:
    answer = await sign_in(system, "carol", password_of("carol"))
    assert answer.status == 201, answer.body
    user = answer.body["user"]
    assert user["username"] == "carol"
    assert user["email"] == "carol@lab.example"
    assert user["roles"] == ["user"]
    assert "ml-team" in user["groups"]
    assert user["source"] == "ldap"
    client = system.anonymous()
    client.token = answer.body["access_token"]
    assert (await client.get("/me")).body["user"]["username"] == "carol"
    # The admin's Accounts page sees where the account comes from.
    assert (await account(system, "carol"))["source"] == "ldap"
    assert (await account(system, "alice"))["source"] == "local"


async def test_a_member_of_an_admin_group_becomes_an_admin(system: ApiSystem) -> None:
    answer = await sign_in(system, "dave", password_of("dave"))
    assert answer.status == 201, answer.body
    assert answer.body["user"]["roles"] == ["user", "admin"]
    assert "ml-team" not in answer.body["user"]["groups"]


async def test_each_sign_in_brings_roles_and_mapped_groups_up_to_date(
    system: ApiSystem, slapd: Slapd
) -> None:
    assert (await sign_in(system, "carol", password_of("carol"))).status == 201
    slapd.modify(
        f"dn: {group_dn('ml')}\nchangetype: modify\nadd: member\nmember: {user_dn('dave')}\n\n"
        f"dn: {group_dn('ml')}\nchangetype: modify\ndelete: member\nmember: {user_dn('carol')}\n"
    )
    try:
        carol = await sign_in(system, "carol", password_of("carol"))
        dave = await sign_in(system, "dave", password_of("dave"))
        assert carol.status == dave.status == 201
        assert "ml-team" not in carol.body["user"]["groups"]
        assert "ml-team" in dave.body["user"]["groups"]
        assert "ml-team" not in (await account(system, "carol"))["groups"]
    finally:
        slapd.modify(
            f"dn: {group_dn('ml')}\nchangetype: modify\nadd: member\n"
            f"member: {user_dn('carol')}\n-\ndelete: member\nmember: {user_dn('dave')}\n"
        )


async def test_wrong_password_and_unknown_user_get_the_same_401(system: ApiSystem) -> None:
    wrong = await sign_in(system, "carol", "not-her-password")
    unknown = await sign_in(system, "nobody-here", "whatever-pw")
    # A filter's wildcard is escaped: "*" names nobody rather than everybody.
    wildcard = await sign_in(system, "*", password_of("carol"))
    assert wrong.status == unknown.status == wildcard.status == 401
    assert wrong.body["message"] == unknown.body["message"] == wildcard.body["message"]
    assert wrong.body["error"] == "authentication_failed"


async def test_a_user_outside_the_allowed_groups_gets_a_403_naming_them(
    system: ApiSystem,
) -> None:
    answer = await sign_in(system, "erin", password_of("erin"))
    assert answer.status == 403, answer.body
    assert "none of the groups allowed to sign in" in answer.body["message"]
    assert "gpu-users" in answer.body["message"]
    admin = await system.as_user("admin")
    assert (await admin.get("/users/erin")).status == 404  # no account was created


async def test_a_directory_user_without_an_e_mail_is_told_why(system: ApiSystem) -> None:
    answer = await sign_in(system, "nomail", password_of("nomail"))
    assert answer.status == 403, answer.body
    assert "e-mail" in answer.body["message"]


async def test_local_accounts_sign_in_with_their_own_passwords(system: ApiSystem) -> None:
    for username in ("admin", "alice"):
        answer = await sign_in(system, username, PASSWORD)
        assert answer.status == 201, answer.body
        assert answer.body["user"]["source"] == "local"
    # bob is a local account and a directory user: only the local password opens it.
    assert (await sign_in(system, "bob", PASSWORD)).status == 201
    assert (await sign_in(system, "bob", password_of("bob"))).status == 401
    assert (await account(system, "bob"))["email"] != "bob-in-the-directory@lab.example"


async def test_a_refused_service_account_is_a_503_without_its_password(
    system: ApiSystem, slapd: Slapd, caplog: pytest.LogCaptureFixture
) -> None:
    changed = "a-new-service-pw"
    slapd.modify(
        f"dn: {SERVICE_DN}\nchangetype: modify\nreplace: userPassword\nuserPassword: {changed}\n"
    )
    try:
        with caplog.at_level(logging.INFO):
            answer = await sign_in(system, "carol", password_of("carol"))
        assert answer.status == 503, answer.body
        assert answer.body["message"].startswith("LDAP bind as bind_dn refused")
        assert SERVICE_PASSWORD not in caplog.text
        assert "LDAP bind as" in caplog.text and SERVICE_DN in caplog.text
        # Local accounts do not need the directory.
        assert (await sign_in(system, "alice", PASSWORD)).status == 201
    finally:
        slapd.modify(
            f"dn: {SERVICE_DN}\nchangetype: modify\nreplace: userPassword\n"
            f"userPassword: {SERVICE_PASSWORD}\n"
        )
    assert (await sign_in(system, "carol", password_of("carol"))).status == 201


async def test_an_unreachable_directory_is_a_503_saying_so(system: ApiSystem, slapd: Slapd) -> None:
    slapd.stop()
    try:
        answer = await sign_in(system, "carol", password_of("carol"))
        assert answer.status == 503, answer.body
        assert f"LDAP server {slapd.url} cannot be reached" in answer.body["message"]
        assert (await sign_in(system, "alice", PASSWORD)).status == 201
    finally:
        slapd.start()
    assert (await sign_in(system, "carol", password_of("carol"))).status == 201


async def test_a_directory_account_has_no_warden_password_and_can_be_deactivated(
    system: ApiSystem,
) -> None:
    first = await sign_in(system, "carol", password_of("carol"))
    assert first.status == 201, first.body
    carol = system.anonymous()
    carol.token = first.body["access_token"]
    admin = await system.as_user("admin")
    for refused in (
        await carol.patch("/users/carol", {"password": "a-warden-password"}),
        await admin.patch("/users/carol", {"password": "a-warden-password"}),
        await admin.post("/users/carol/reset"),
    ):
        assert refused.status == 409, refused.body
        assert "directory" in refused.body["message"]
    deactivated = await admin.post("/users/carol/deactivate", {})
    assert deactivated.status == 200, deactivated.body
    again = await sign_in(system, "carol", password_of("carol"))
    assert again.status == 403, again.body
    assert "deactivated" in again.body["message"]
    assert (await admin.post("/users/carol/activate")).status == 200
    assert (await sign_in(system, "carol", password_of("carol"))).status == 201
