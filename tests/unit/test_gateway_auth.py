"""Access tokens and the login limit (pure: the clock is the test's)."""

from __future__ import annotations

import time
from ipaddress import ip_network
from typing import Any

import jwt
import pytest

from services.gateway.auth import Caller, Revocations, TokenIssuer
from services.gateway.routes.session import client_address
from services.gateway.routing import Authenticator
from services.shared.errors import AuthenticationFailed

SECRET = "s" * 48


class Clock:
    def __init__(self, now: float = 1_800_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_a_token_names_the_user_and_whether_they_are_an_admin() -> None:
    issuer = TokenIssuer(SECRET, 900, Clock())
    admin = issuer.access_token({"username": "root", "roles": ["user", "admin"]})
    user = issuer.access_token({"username": "alice", "roles": ["user"]})
    assert issuer.verify(admin) == Caller("root", True)
    assert issuer.verify(user) == Caller("alice", False)
    assert issuer.verify(user).roles == ["user"]


def test_a_token_says_when_an_admin_chose_the_password() -> None:
    issuer = TokenIssuer(SECRET, 900, Clock())
    chosen = issuer.access_token({"username": "ann", "roles": ["user"], "change_at_sign_in": True})
    own = issuer.access_token({"username": "ann", "roles": ["user"], "change_at_sign_in": False})
    assert issuer.verify(chosen).must_change_password is True
    assert issuer.verify(own).must_change_password is False
    assert issuer.verify(issuer.access_token({"username": "ann"})).must_change_password is False


def test_a_token_issued_just_after_a_revocation_is_kept() -> None:
    # Revoked at T, then signed in again 0.2 ms later (a new password, then a new token).
    clock = Clock(1_800_000_000.0002)
    issuer = TokenIssuer(SECRET, 900, clock)
    revocations = Revocations(900, clock)
    revocations.revoke("ann", None, clock.now)
    clock.now += 0.0002
    fresh = issuer.verify(issuer.access_token({"username": "ann"}))
    assert not revocations.revoked(fresh)
    clock.now -= 0.5
    old = issuer.verify(issuer.access_token({"username": "ann"}))
    assert revocations.revoked(old)


def test_an_expired_token_is_refused_with_a_hint_to_refresh() -> None:
    clock = Clock()
    issuer = TokenIssuer(SECRET, 900, clock)
    token = issuer.access_token({"username": "alice", "roles": ["user"]})
    clock.now += 899
    assert issuer.verify(token).username == "alice"
    clock.now += 1
    with pytest.raises(AuthenticationFailed, match="expired"):
        issuer.verify(token)


@pytest.mark.parametrize(
    "forge",
    [
        lambda: jwt.encode({"sub": "root", "adm": True, "iss": "warden", "exp": 2**40}, "x" * 48),
        lambda: jwt.encode({"sub": "root", "adm": True, "exp": 2**40}, SECRET),  # no issuer
        lambda: jwt.encode(
            {"sub": "root", "adm": True, "iss": "warden", "exp": 2**40}, SECRET * 2, "HS512"
        ),
        lambda: "not-a-token",
        lambda: jwt.encode({"sub": "root", "adm": True, "iss": "warden"}, SECRET),  # no exp
        # A string expiry: PyJWT accepts "2000" as a number, the comparison must not.
        lambda: jwt.encode({"sub": "root", "adm": True, "iss": "warden", "exp": "2000"}, SECRET),
    ],
)
def test_forged_or_malformed_tokens_are_refused(forge) -> None:  # type: ignore[no-untyped-def]
    issuer = TokenIssuer(SECRET, 900, Clock(1_000.0))
    with pytest.raises(AuthenticationFailed):
        issuer.verify(forge())


def test_the_caller_carries_its_tokens_expiry() -> None:
    clock = Clock()
    issuer = TokenIssuer(SECRET, 900, clock)
    caller = issuer.verify(issuer.access_token({"username": "alice", "roles": ["user"]}))
    assert caller.expires_at == clock.now + 900


# --- a burst of parallel attempts, proxies, revocation ------------------------------------------


TRUSTED = (ip_network("127.0.0.1/32"), ip_network("10.0.0.0/8"))


@pytest.mark.parametrize(
    ("remote", "forwarded", "trusted", "client"),
    [
        ("203.0.113.9", "", TRUSTED, "203.0.113.9"),  # no proxy
        ("203.0.113.9", "198.51.100.1", TRUSTED, "203.0.113.9"),  # an untrusted peer's header
        ("127.0.0.1", "198.51.100.1", TRUSTED, "198.51.100.1"),  # behind our proxy
        ("127.0.0.1", "6.6.6.6, 198.51.100.1, 10.1.2.3", TRUSTED, "198.51.100.1"),  # forged left
        ("127.0.0.1", "198.51.100.1", (), "127.0.0.1"),  # no trusted proxy configured
        ("127.0.0.1", "", TRUSTED, "127.0.0.1"),
        ("127.0.0.1", "garbage", TRUSTED, "garbage"),
    ],
)
def test_the_client_address_behind_trusted_proxies(
    remote: str, forwarded: str, trusted: Any, client: str
) -> None:
    assert client_address(remote, forwarded, trusted) == client


def test_a_revoked_session_and_a_users_earlier_tokens_are_refused() -> None:
    clock = Clock(1_000.0)
    revocations = Revocations(900, clock)
    alice = Caller("alice", False, 1_900.0, issued_at=1_000.0, session="s1")
    other = Caller("alice", False, 1_900.0, issued_at=1_000.0, session="s2")
    assert not revocations.revoked(alice)
    revocations.revoke("alice", "s1", 1_001.0)
    assert revocations.revoked(alice) and not revocations.revoked(other)
    revocations.revoke("alice", None, 1_002.0)  # a new password: every earlier token
    assert revocations.revoked(other)
    later = Caller("alice", False, 2_000.0, issued_at=1_002.5, session="s3")
    assert not revocations.revoked(later)
    clock.now = 3_000.0  # past every token's life: forgotten
    revocations.revoke("bob", "x", 3_000.0)
    assert not revocations.revoked(alice)


def test_the_authenticator_refuses_a_token_of_a_revoked_session_even_when_cached() -> None:
    clock = Clock(time.time())
    issuer = TokenIssuer(SECRET, 900, clock)
    revocations = Revocations(900, clock)
    authenticator = Authenticator(issuer, revocations)
    token = issuer.access_token({"username": "alice", "roles": ["user"]}, "s1")

    class Request:
        headers = {"Authorization": f"Bearer {token}"}
        query: dict[str, str] = {}

    assert authenticator.caller(Request()) == Caller("alice", False)  # type: ignore[arg-type]
    revocations.revoke("alice", "s1", clock())
    with pytest.raises(AuthenticationFailed, match="sign-in has ended"):
        authenticator.caller(Request())  # type: ignore[arg-type]
