"""The pure pieces of LDAP sign-in (services.accounts.ldap_directory): filters escaped per
RFC 4515, DNs compared as the directory does, what a user's groups grant, `group_map` parsing."""

from __future__ import annotations

import dataclasses

import pytest

from services.accounts.ldap_directory import (
    LdapDirectory,
    grant,
    group_filter,
    normalize_dn,
    user_filter,
)
from services.shared.config.ldap import GroupMapping, LdapSettings, parse_group_mapping
from services.shared.errors import AuthenticationFailed, Forbidden

ML = "cn=ml,ou=groups,dc=lab,dc=example"
STAFF = "cn=staff,ou=groups,dc=lab,dc=example"
ADMINS = "cn=admins,ou=groups,dc=lab,dc=example"


def test_the_username_is_escaped_in_the_user_filter() -> None:
    assert user_filter("(uid={username})", "alice") == "(uid=alice)"
    assert user_filter("(uid={username})", "*") == "(uid=\\2a)"
    assert user_filter("(uid={username})", "a)(uid=*") == "(uid=a\\29\\28uid=\\2a)"
    assert user_filter("(uid={username})", "back\\slash") == "(uid=back\\5cslash)"
    assert user_filter("(uid={username})", "nul\0") == "(uid=nul\\00)"


def test_the_group_filter_escapes_the_dn_and_the_username() -> None:
    found = group_filter("(|(member={dn})(memberUid={username}))", dn="uid=a*,dc=x", username="a*")
    assert found == "(|(member=uid=a\\2a,dc=x)(memberUid=a\\2a))"


def test_dns_compare_without_case_or_spaces() -> None:
    assert normalize_dn("CN=ML, OU=Groups ,DC=lab,DC=example") == normalize_dn(ML)
    assert normalize_dn(ML) != normalize_dn(STAFF)


def settings(**values: object) -> LdapSettings:
    return dataclasses.replace(LdapSettings(url="ldap://x"), **values)


def groups(*dns: str) -> frozenset[str]:
    return frozenset(normalize_dn(dn) for dn in dns)


def test_no_allowed_groups_lets_every_user_in_and_leaves_roles_to_warden() -> None:
    granted = grant(settings(), groups())
    assert granted.is_admin is None
    assert granted.groups == granted.managed == frozenset()


def test_a_user_outside_the_allowed_groups_is_refused_with_their_names() -> None:
    with pytest.raises(Forbidden) as refused:
        grant(settings(allowed_groups=(STAFF, ADMINS)), groups(ML))
    assert STAFF in refused.value.message and ADMINS in refused.value.message
    assert grant(settings(allowed_groups=(STAFF,)), groups(ML, STAFF.upper())).is_admin is None


def test_admin_groups_decide_the_role_and_group_map_the_warden_groups() -> None:
    chosen = settings(
        admin_groups=(ADMINS,),
        group_map=(GroupMapping(ML, "ml-team"), GroupMapping(STAFF, "staff")),
    )
    admin = grant(chosen, groups(ADMINS, ML))
    assert admin.is_admin is True
    assert admin.groups == {"ml-team"}
    assert admin.managed == {"ml-team", "staff"}
    assert grant(chosen, groups(STAFF)).is_admin is False


def test_group_map_entries_are_parsed_or_refused_with_the_reason() -> None:
    assert parse_group_mapping(f"{ML} -> ml-team") == GroupMapping(ML, "ml-team")
    for bad, why in [
        ("ml-team", "write it as"),
        (f"{ML} ->", "not a Warden group name"),
        (f"{ML} -> ml team", "not a Warden group name"),
        ("-> ml-team", "write it as"),
    ]:
        with pytest.raises(ValueError, match=why):
            parse_group_mapping(bad)


async def test_an_empty_password_is_refused_before_the_directory_is_asked() -> None:
    # An empty password is an anonymous bind, which a directory accepts: never a sign-in.
    # (ldap://x cannot be reached: had it been asked, this would be a 503.)
    with pytest.raises(AuthenticationFailed):
        await LdapDirectory(settings()).sign_in("alice", "")
