"""Password hashing with argon2id (argon2-cffi's recommended parameters).

Verification of an unknown user checks the password against a dummy hash, so an attacker
cannot tell "no such user" from "wrong password" by the time the answer takes.
"""

from __future__ import annotations

from functools import lru_cache

from argon2 import PasswordHasher
from argon2.exceptions import InvalidHashError, VerificationError

MIN_PASSWORD_LENGTH = 8
MAX_PASSWORD_LENGTH = 1024  # argon2 takes any length; this bounds the work per request

_hasher = PasswordHasher()


def password_problem(password: str) -> str | None:
    """Why `password` is refused, or None."""
    if len(password) < MIN_PASSWORD_LENGTH:
        return f"must be at least {MIN_PASSWORD_LENGTH} characters"
    if len(password) > MAX_PASSWORD_LENGTH:
        return f"must be at most {MAX_PASSWORD_LENGTH} characters"
    return None


def hash_password(password: str) -> str:
    return _hasher.hash(password)


@lru_cache(maxsize=1)
def _dummy_hash() -> str:
    return _hasher.hash("not the password of anyone")


def verify_password(password_hash: str | None, password: str) -> bool:
    """True when `password` matches; with no hash (unknown user) it costs the same and fails."""
    try:
        return _hasher.verify(password_hash or _dummy_hash(), password) and bool(password_hash)
    except (VerificationError, InvalidHashError):
        return False
