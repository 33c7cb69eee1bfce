"""Signing in against an LDAP directory (`[auth.ldap]`): search for the user as the service
account, bind as the entry found with the password typed, read the user's groups.

The pure pieces (filters, DN comparison, what the groups grant) are separate from
`LdapDirectory`, which talks to the server with ldap3. ldap3 is synchronous: each sign-in runs in a
thread, so the event loop never waits on the directory.
"""

from __future__ import annotations

import asyncio
import logging
import math
import ssl
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ldap3 import NONE, SUBTREE, Connection, Server, Tls
from ldap3.core.exceptions import LDAPException
from ldap3.utils.conv import escape_filter_chars
from ldap3.utils.dn import parse_dn

from services.shared.config.ldap import LdapSettings
from services.shared.errors import AuthenticationFailed, Forbidden, ServiceUnavailable

log = logging.getLogger("warden.reservations.ldap")

# The same words as a wrong local password: whether a name exists is not told.
WRONG_LOGIN = "wrong username or password"


@dataclass(frozen=True)
class DirectoryUser:
    dn: str
    username: str
    email: str
    groups: frozenset[str]  # DNs, as normalize_dn gives them


@dataclass(frozen=True)
class Grant:
    """What a directory user's groups give them in Warden."""

    is_admin: bool | None  # None: roles are managed in Warden (no admin_groups)
    groups: frozenset[str]  # the mapped Warden groups they belong to
    managed: frozenset[str]  # every Warden group of group_map (the others are left alone)


# --- pure pieces ------------------------------------------------------------------------------


def user_filter(template: str, username: str) -> str:
    """The search filter for `username`, escaped so that `*`, `(`, `)`, `\\` and NUL are
    literal (RFC 4515): a name like `*` finds nobody rather than everybody."""
    return template.replace("{username}", escape_filter_chars(username))


def group_filter(template: str, *, dn: str, username: str) -> str:
    return template.replace("{dn}", escape_filter_chars(dn)).replace(
        "{username}", escape_filter_chars(username)
    )


def normalize_dn(dn: str) -> str:
    """A DN as compared: attribute names and values in lower case, no spaces around `,`/`=`."""
    try:
        parts = parse_dn(dn, escape=False, strip=True)
    except LDAPException:
        return dn.strip().lower()
    return ",".join(f"{name.lower()}={value.lower()}" for name, value, _ in parts)


def _normalized(dns: Iterable[str]) -> frozenset[str]:
    return frozenset(normalize_dn(dn) for dn in dns)


def grant(settings: LdapSettings, groups: frozenset[str]) -> Grant:
    """What `groups` (normalized DNs) give; Forbidden when allowed_groups names none of them."""
    allowed = _normalized(settings.allowed_groups)
    if allowed and not allowed & groups:
        listed = "; ".join(settings.allowed_groups)
        raise Forbidden(
            f"your directory account is in none of the groups allowed to sign in: {listed}",
            {"allowed_groups": list(settings.allowed_groups)},
        )
    admin = _normalized(settings.admin_groups)
    mapped = {m.group for m in settings.group_map if normalize_dn(m.dn) in groups}
    return Grant(
        is_admin=bool(admin & groups) if admin else None,
        groups=frozenset(mapped),
        managed=frozenset(m.group for m in settings.group_map),
    )


def _first(values: object) -> str:
    if isinstance(values, list | tuple):
        return str(values[0]) if values else ""
    return "" if values is None else str(values)


def _strings(values: object) -> list[str]:
    if isinstance(values, list | tuple):
        return [str(value) for value in values]
    return [] if values is None else [str(values)]


# --- the server -------------------------------------------------------------------------------


class LdapDirectory:
    def __init__(self, settings: LdapSettings) -> None:
        self.settings = settings

    async def sign_in(self, username: str, password: str) -> DirectoryUser:
        """The user when `password` is theirs. AuthenticationFailed for a wrong password or an
        unknown user alike, ServiceUnavailable when the directory cannot answer."""
        if not password:  # an empty password is an anonymous bind: it would "succeed"
            raise AuthenticationFailed(WRONG_LOGIN)
        # The thread cannot be stopped, but the caller is answered within the deadline (the
        # login RPC waits 30 s: at most 3 times 8 s here, then the database).
        deadline = 3 * self.settings.timeout_s
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._sign_in, username, password), deadline
            )
        except TimeoutError:
            reason = f"LDAP server {self.settings.url} did not answer within {deadline:g}s"
            log.warning("%s", reason)
            raise ServiceUnavailable(reason) from None

    def _server(self) -> Server:
        s = self.settings
        tls = None
        if s.url.startswith("ldaps://") or s.start_tls:
            tls = Tls(validate=ssl.CERT_REQUIRED, ca_certs_file=s.ca_file or None)
        return Server(
            s.url,
            use_ssl=s.url.startswith("ldaps://"),
            tls=tls,
            get_info=NONE,
            connect_timeout=s.timeout_s,
        )

    def _open(self, server: Server, user: str | None, password: str | None) -> Connection:
        """An open connection (StartTLS done when asked), not yet bound."""
        conn = Connection(
            server,
            user=user,
            password=password,
            # ldap3 packs it into SO_RCVTIMEO as whole seconds.
            receive_timeout=max(1, math.ceil(self.settings.timeout_s)),
            raise_exceptions=False,
        )
        try:
            conn.open()
            if self.settings.start_tls and not conn.start_tls():
                raise ServiceUnavailable(
                    f"LDAP server {self.settings.url} refused StartTLS: {conn.result}"
                )
        except LDAPException as err:
            raise self._down(err) from None
        return conn

    def _down(self, err: Exception) -> ServiceUnavailable:
        reason = f"LDAP server {self.settings.url} cannot be reached: {err}"
        log.warning("%s", reason)
        return ServiceUnavailable(reason, {"ldap": str(err)})

    def _sign_in(self, username: str, password: str) -> DirectoryUser:
        s = self.settings
        server = self._server()
        service = self._open(server, s.bind_dn or None, s.bind_password or None)
        try:
            if not service.bind():
                described = (service.result or {}).get("description", "refused")
                # The DN only: never the password.
                log.error("LDAP bind as %s refused: %s", s.bind_dn or "(anonymous)", described)
                raise ServiceUnavailable(
                    "LDAP bind as bind_dn refused: check [auth.ldap] bind_dn and bind_password",
                    {"ldap": described},
                )
            found = self._find(service, username)
            self._check_password(server, found[0], password)
            return self._user(service, found, username)
        except LDAPException as err:
            raise self._down(err) from None
        finally:
            service.unbind()

    def _find(self, service: Connection, username: str) -> tuple[str, dict[str, object]]:
        s = self.settings
        attributes = [s.username_attribute, s.email_attribute]
        if not s.group_base_dn:
            attributes.append("memberOf")
        service.search(
            s.user_base_dn,
            user_filter(s.user_filter, username),
            SUBTREE,
            attributes=attributes,
            size_limit=2,
        )
        entries = [e for e in service.response or () if e.get("type") == "searchResEntry"]
        if len(entries) != 1:
            if entries:
                log.warning("LDAP: %d entries match %r; refused", len(entries), username)
            raise AuthenticationFailed(WRONG_LOGIN)
        return entries[0]["dn"], dict(entries[0].get("attributes") or {})

    def _check_password(self, server: Server, dn: str, password: str) -> None:
        user = self._open(server, dn, password)
        try:
            if not user.bind():
                raise AuthenticationFailed(WRONG_LOGIN)
        finally:
            user.unbind()

    def _user(
        self, service: Connection, found: tuple[str, dict[str, object]], typed: str
    ) -> DirectoryUser:
        s = self.settings
        dn, attributes = found
        username = _first(attributes.get(s.username_attribute)) or typed
        if s.group_base_dn:
            service.search(
                s.group_base_dn,
                group_filter(s.group_filter, dn=dn, username=username),
                SUBTREE,
                attributes=[],
            )
            dns: Sequence[str] = [
                e["dn"] for e in service.response or () if e.get("type") == "searchResEntry"
            ]
        else:
            dns = _strings(attributes.get("memberOf"))
        return DirectoryUser(
            dn=dn,
            username=username,
            email=_first(attributes.get(s.email_attribute)),
            groups=_normalized(dns),
        )
