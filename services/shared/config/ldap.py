"""`[auth.ldap]`: signing in with a directory account (search, then bind as the user found).

Groups are named by their DN everywhere (allowed_groups, admin_groups, group_map), compared
without regard to case or spaces after commas. Lists of DNs come from the file only: the
environment's comma-separated lists cannot hold a DN.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from services.shared.config.declare import option, parsed

_WARDEN_GROUP = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class GroupMapping:
    """A directory group (by DN) whose members are put in a Warden group."""

    dn: str
    group: str


def parse_group_mapping(text: str) -> GroupMapping:
    """`"cn=ml,ou=groups,dc=lab,dc=example -> ml-team"`."""
    dn, arrow, group = text.rpartition("->")
    dn, group = dn.strip(), group.strip()
    if not arrow or not dn or "=" not in dn:
        raise ValueError(f'{text!r}: write it as "<group DN> -> <Warden group>"')
    if not _WARDEN_GROUP.fullmatch(group):
        raise ValueError(
            f"{group!r} is not a Warden group name (1-64 letters, digits, '_', '.' or '-')"
        )
    return GroupMapping(dn, group)


@dataclass(frozen=True)
class LdapSettings:
    """Signing in with a directory (LDAP) account. Off while url is empty. Local accounts
    still sign in with their own password; a name with no local account is looked up in the
    directory, and an account is created at its first sign-in."""

    url: str = option(
        "",
        "The directory server, e.g. ldaps://ldap.lab.example; empty: LDAP sign-in is off.",
        prefixes=("ldap://", "ldaps://"),
    )
    start_tls: bool = option(
        False, "true: upgrade an ldap:// connection with StartTLS before anything is sent."
    )
    ca_file: str = option(
        "",
        "CA certificates (PEM) that the server's certificate must chain to (ldaps:// or "
        "StartTLS); empty: the system's.",
    )
    bind_dn: str = option(
        "",
        "The service account that searches for users, e.g. "
        '"cn=warden,ou=services,dc=lab,dc=example"; empty: search anonymously.',
    )
    bind_password: str = option(
        "",
        "The service account's password; set it with WARDEN_AUTH_LDAP_BIND_PASSWORD rather "
        "than in the file. Never logged.",
        secret=True,
    )
    user_base_dn: str = option(
        "", "Where users are searched (the subtree), e.g. ou=people,dc=lab,dc=example."
    )
    user_filter: str = option(
        "(uid={username})",
        "Finds the user; {username} is replaced by the name typed, escaped (RFC 4515). "
        "Exactly one entry must match.",
    )
    username_attribute: str = option(
        "uid", "The attribute that holds the Warden username (the account's name)."
    )
    email_attribute: str = option("mail", "The attribute that holds the user's e-mail address.")
    group_base_dn: str = option(
        "",
        "Where groups are searched, e.g. ou=groups,dc=lab,dc=example; empty: the user's "
        "memberOf attribute lists their groups.",
    )
    group_filter: str = option(
        "(|(member={dn})(uniqueMember={dn}))",
        "Finds the user's groups under group_base_dn; {dn} is the user's DN, {username} the "
        "username (both escaped).",
    )
    allowed_groups: tuple[str, ...] = option(
        (),
        "Only members of one of these groups (DNs) may sign in; empty: every user found.",
    )
    admin_groups: tuple[str, ...] = option(
        (),
        "Members of one of these groups (DNs) are admins, others not (set at each sign-in); "
        "empty: roles are managed in Warden.",
    )
    group_map: tuple[GroupMapping, ...] = parsed(
        (),
        parse_group_mapping,
        'Directory group → Warden group, as "<group DN> -> <Warden group>": at each sign-in '
        "the user is put in the mapped groups they belong to and taken out of the others "
        "(a missing Warden group is created).",
    )
    timeout_s: float = option(
        5.0,
        "Deadline of connecting and of each directory request, in seconds; a whole sign-in "
        "gets three times as long.",
        min=0.1,
        max=8,
    )
