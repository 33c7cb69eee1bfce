"""Access tokens (short-lived JWTs) and their revocations. Pure: no I/O, clock passed in.

The access token says who the caller is and whether they are an admin, for the gateway's own
route checks; the services look roles up again themselves for anything they decide. Refresh
tokens are opaque and live in the reservations service (rotation, family revocation).
"""

from __future__ import annotations

import math
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import jwt

from services.shared.contracts import Envelope
from services.shared.errors import AuthenticationFailed

ALGORITHM = "HS256"
ISSUER = "warden"


def to_ms(seconds: float) -> float:
    """Unix time cut to the millisecond (never rounded up past a later event)."""
    return math.floor(seconds * 1000) / 1000


@dataclass(frozen=True)
class Caller:
    username: str
    is_admin: bool
    # When the token that names this caller expires and was issued (Unix time), and the
    # login session it belongs to: what revocation checks, not part of who they are.
    expires_at: float = field(default=0.0, compare=False)
    issued_at: float = field(default=0.0, compare=False)
    session: str = field(default="", compare=False)
    # An admin chose the password: until its owner chooses one, only that is allowed
    # (`password_routes`).
    must_change_password: bool = field(default=False, compare=False)

    @property
    def roles(self) -> list[str]:
        return ["user", "admin"] if self.is_admin else ["user"]


class TokenIssuer:
    def __init__(self, secret: str, ttl_s: int, clock: Callable[[], float] = time.time) -> None:
        self._secret = secret
        self.ttl_s = ttl_s
        self._clock = clock

    def access_token(self, user: dict[str, Any], session: str = "") -> str:
        now = self._clock()
        claims = {
            "iss": ISSUER,
            "sub": user["username"],
            "adm": "admin" in user.get("roles", ()),
            "iat": to_ms(now),  # a revocation at T covers tokens of the milliseconds before T
            "exp": int(now) + self.ttl_s,
            "jti": uuid.uuid4().hex,
            "sid": session,
            "chg": user.get("change_at_sign_in") is True,
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
        issued = claims.get("iat", 0.0)
        session = claims.get("sid", "")
        return Caller(
            claims["sub"],
            claims.get("adm") is True,
            float(expires),
            float(issued) if isinstance(issued, int | float) else 0.0,
            session if isinstance(session, str) else "",
            claims.get("chg") is True,
        )


class Revocations:
    """Sessions that ended (logout, a reused refresh token) and users whose every session
    ended at a time (a new password), from the reservations service's `session.revoked`
    events: their access tokens are refused before they expire. Kept for the tokens'
    lifetime, after which those tokens are refused anyway."""

    def __init__(self, ttl_s: float, clock: Callable[[], float] = time.time) -> None:
        self.ttl_s = ttl_s
        self._clock = clock
        self._sessions: dict[str, float] = {}  # session -> when it may be forgotten
        self._users: dict[str, float] = {}  # username -> tokens issued before this are out

    def revoke(self, username: str, session: str | None, at: float) -> None:
        # To the millisecond, as tokens' `iat`: a token issued right after a revocation (a new
        # password, then a new sign-in) is not refused for falling in the same millisecond.
        at = to_ms(at)
        self._forget_old()
        if session:
            self._sessions[session] = at + self.ttl_s
        else:
            self._users[username] = max(at, self._users.get(username, 0.0))

    def revoked(self, caller: Caller) -> bool:
        if caller.session and caller.session in self._sessions:
            return True
        before = self._users.get(caller.username)
        return before is not None and caller.issued_at < before

    async def on_event(self, envelope: Envelope) -> None:
        """A `session.revoked` event of the reservations service."""
        data = envelope.data
        at = datetime.fromisoformat(data["at"]).timestamp()
        self.revoke(data["username"], data.get("session"), at)

    def _forget_old(self) -> None:
        now = self._clock()
        for session in [s for s, until in self._sessions.items() if until < now]:
            del self._sessions[session]
        for user in [u for u, at in self._users.items() if at + self.ttl_s < now]:
            del self._users[user]


# What a caller whose password an admin chose may still do: read who they are, choose their
# password, follow the live stream, sign out (public routes are open to anyone).
PASSWORD_ROUTES = frozenset(
    {
        ("GET", "/me"),
        ("GET", "/users/{username}"),
        ("PATCH", "/users/{username}"),
        ("GET", "/stream"),
    }
)
MUST_CHANGE = "an admin chose your password: choose your own first (My account, `warden passwd`)"
