"""Access tokens (short-lived JWTs) and the login rate limit. Pure: no I/O, clock passed in.

The access token says who the caller is and whether they are an admin, for the gateway's own
route checks; the services look roles up again themselves for anything they decide. Refresh
tokens are opaque and live in the reservations service (rotation, family revocation).
"""

from __future__ import annotations

import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import jwt

from services.shared.errors import AuthenticationFailed

ALGORITHM = "HS256"
ISSUER = "warden"


@dataclass(frozen=True)
class Caller:
    username: str
    is_admin: bool
    # When the token that names this caller expires (Unix time); not part of who they are.
    expires_at: float = field(default=0.0, compare=False)

    @property
    def roles(self) -> list[str]:
        return ["user", "admin"] if self.is_admin else ["user"]


class TokenIssuer:
    def __init__(self, secret: str, ttl_s: int, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self.ttl_s = ttl_s
        self._clock = clock

    def access_token(self, user: dict[str, Any]) -> str:
        now = int(self._clock())
        claims = {
            "iss": ISSUER,
            "sub": user["username"],
            "adm": "admin" in user.get("roles", ()),
            "iat": now,
            "exp": now + self.ttl_s,
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(claims, self._secret, algorithm=ALGORITHM)

    def verify(self, token: str) -> Caller:
        """The caller a valid, unexpired token names; AuthenticationFailed otherwise."""
        try:
            claims = jwt.decode(
                token,
                self._secret,
                algorithms=[ALGORITHM],
                issuer=ISSUER,
                options={"require": ["exp", "sub", "iss"], "verify_iat": False},
                leeway=0,
            )
        except jwt.ExpiredSignatureError as err:
            raise AuthenticationFailed("the access token expired; refresh it") from err
        except jwt.PyJWTError as err:
            raise AuthenticationFailed("the access token is invalid") from err
        expires = claims["exp"]
        if isinstance(expires, bool) or not isinstance(expires, int | float):
            raise AuthenticationFailed("the access token is invalid")  # PyJWT takes "123" too
        # PyJWT checks expiry against the wall clock; ours may be a test's.
        if expires <= self._clock():
            raise AuthenticationFailed("the access token expired; refresh it")
        if not isinstance(claims["sub"], str) or not claims["sub"]:
            raise AuthenticationFailed("the access token is invalid")
        return Caller(claims["sub"], claims.get("adm") is True, float(claims["exp"]))


class LoginLimiter:
    """Failed logins per key (a username, a client address) within a sliding window."""

    def __init__(
        self, window_s: float, max_failures: int, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.window_s = window_s
        self.max_failures = max_failures
        self._clock = clock
        self._failures: dict[str, deque[float]] = {}

    def _recent(self, key: str) -> deque[float]:
        failures = self._failures.get(key)
        if failures is None:
            return deque()
        horizon = self._clock() - self.window_s
        while failures and failures[0] <= horizon:
            failures.popleft()
        if not failures:
            del self._failures[key]
        return failures

    def retry_after(self, key: str) -> float | None:
        """Seconds until `key` may try again, or None when it may now."""
        failures = self._recent(key)
        if len(failures) < self.max_failures:
            return None
        return max(0.0, failures[0] + self.window_s - self._clock())

    def failed(self, key: str) -> None:
        self._failures.setdefault(key, deque()).append(self._clock())
        if len(self._failures) > 100_000:  # a flood of made-up names: forget the oldest
            self._failures.pop(next(iter(self._failures)))

    def succeeded(self, key: str) -> None:
        self._failures.pop(key, None)
