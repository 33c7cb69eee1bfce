"""Access tokens and the login limit (pure: the clock is the test's)."""

from __future__ import annotations

import jwt
import pytest

from services.gateway.auth import Caller, LoginLimiter, TokenIssuer
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


def test_the_limiter_blocks_after_max_failures_until_the_window_passes() -> None:
    clock = Clock(100.0)
    limiter = LoginLimiter(60.0, 3, clock)
    for _ in range(3):
        assert limiter.retry_after("alice") is None
        limiter.failed("alice")
        clock.now += 1
    assert limiter.retry_after("alice") == pytest.approx(57.0)
    assert limiter.retry_after("bob") is None
    clock.now += 57
    assert limiter.retry_after("alice") is None


def test_a_success_clears_the_failures_of_that_key() -> None:
    limiter = LoginLimiter(60.0, 2, Clock())
    limiter.failed("alice")
    limiter.succeeded("alice")
    limiter.failed("alice")
    assert limiter.retry_after("alice") is None


def test_the_caller_carries_its_tokens_expiry() -> None:
    clock = Clock()
    issuer = TokenIssuer(SECRET, 900, clock)
    caller = issuer.verify(issuer.access_token({"username": "alice", "roles": ["user"]}))
    assert caller.expires_at == clock.now + 900
