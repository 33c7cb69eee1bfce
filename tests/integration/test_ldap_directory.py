"""services.accounts.ldap_directory against a real OpenLDAP server (slapd) offering StartTLS:
the certificate is checked against ca_file, groups come from a search or are none, and what the
server says is told apart (a wrong password, a refused service account, an unreachable server).
The whole sign-in through the API is tests/e2e/test_api_ldap.py."""

from __future__ import annotations

import dataclasses
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from services.accounts.ldap_directory import LdapDirectory, normalize_dn
from services.shared.config.ldap import LdapSettings
from services.shared.errors import AuthenticationFailed, ServiceUnavailable
from tests.support.ports import free_port
from tests.support.slapd import (
    GROUPS_DN,
    PEOPLE,
    SERVICE_DN,
    SERVICE_PASSWORD,
    Slapd,
    group_dn,
    make_certificates,
    password_of,
    running_slapd,
    user_dn,
)

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def slapd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Slapd]:
    with running_slapd(tmp_path_factory.mktemp("slapd-tls"), tls=True) as server:
        yield server


def directory(slapd: Slapd, **values: object) -> LdapDirectory:
    assert slapd.tls is not None
    settings = LdapSettings(
        url=slapd.url,
        start_tls=True,
        ca_file=str(slapd.tls[0]),
        bind_dn=SERVICE_DN,
        bind_password=SERVICE_PASSWORD,
        user_base_dn=PEOPLE,
        group_base_dn=GROUPS_DN,
        timeout_s=3,
    )
    return LdapDirectory(dataclasses.replace(settings, **values))


async def test_a_user_signs_in_over_start_tls_with_their_groups(slapd: Slapd) -> None:
    user = await directory(slapd).sign_in("carol", password_of("carol"))
    assert (user.dn, user.username, user.email) == (
        user_dn("carol"),
        "carol",
        "carol@lab.example",
    )
    assert user.groups == {normalize_dn(group_dn("gpu-users")), normalize_dn(group_dn("ml"))}


async def test_without_group_base_dn_the_groups_are_the_users_member_of(slapd: Slapd) -> None:
    # This slapd keeps no memberOf: the user is in no group (and allowed_groups would refuse).
    user = await directory(slapd, group_base_dn="").sign_in("carol", password_of("carol"))
    assert user.groups == frozenset()


async def test_a_certificate_of_another_ca_is_refused_as_unreachable(
    slapd: Slapd, tmp_path: Path
) -> None:
    other_ca, _, _ = make_certificates(tmp_path, "other")
    with pytest.raises(ServiceUnavailable, match="certificate verify failed"):
        await directory(slapd, ca_file=str(other_ca)).sign_in("carol", password_of("carol"))
    ldaps = {"url": slapd.ldaps_url, "start_tls": False}
    with pytest.raises(ServiceUnavailable, match="certificate verify failed"):
        await directory(slapd, ca_file=str(other_ca), **ldaps).sign_in(
            "carol", password_of("carol")
        )


async def test_a_user_signs_in_over_ldaps(slapd: Slapd) -> None:
    ldaps = directory(slapd, url=slapd.ldaps_url, start_tls=False)
    assert (await ldaps.sign_in("dave", password_of("dave"))).email == "dave@lab.example"


async def test_wrong_password_and_unknown_user_are_the_same_failure(slapd: Slapd) -> None:
    with pytest.raises(AuthenticationFailed) as wrong:
        await directory(slapd).sign_in("carol", "not-her-password")
    with pytest.raises(AuthenticationFailed) as unknown:
        await directory(slapd).sign_in("zed", "whatever")
    assert wrong.value.message == unknown.value.message


async def test_a_refused_service_account_and_a_closed_port_say_which(slapd: Slapd) -> None:
    with pytest.raises(ServiceUnavailable, match=r"^LDAP bind as bind_dn refused"):
        await directory(slapd, bind_password="wrong").sign_in("carol", password_of("carol"))
    closed = f"ldap://127.0.0.1:{free_port()}"
    with pytest.raises(ServiceUnavailable, match=rf"^LDAP server {closed} cannot be reached"):
        await directory(slapd, url=closed).sign_in("carol", password_of("carol"))


async def test_a_server_that_never_answers_is_a_503_within_the_deadline(slapd: Slapd) -> None:
    # A port that accepts connections (the kernel's backlog) and never says a word.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"ldap://127.0.0.1:{silent.getsockname()[1]}"
        quiet = directory(slapd, url=url, start_tls=False, timeout_s=0.5)
        with pytest.raises(ServiceUnavailable, match=r"cannot be reached|did not answer within"):
            await quiet.sign_in("carol", password_of("carol"))
