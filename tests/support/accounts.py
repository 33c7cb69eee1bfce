"""The accounts of the end-to-end systems, and cheap password hashing for tests that create
many accounts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from argon2 import PasswordHasher

from services.accounts import passwords, provisioning
from services.accounts.provisioning import NewAccount
from services.shared.config import Settings

PASSWORD = "pw-12345678"  # every account's
USERS = (("admin", True), ("alice", False), ("bob", False))  # (username, is admin)


async def create_accounts(settings: Settings) -> None:
    """Migrate every service's database; admin, alice and bob (e-mail user@lab.example)."""
    await provisioning.migrate_with_accounts(
        settings,
        [NewAccount(user, f"{user}@lab.example", PASSWORD, admin) for user, admin in USERS],
        actor="test",
    )


@contextlib.contextmanager
def cheap_passwords() -> Iterator[None]:
    """Real argon2 at cheap parameters while it lasts (fixture `cheap_passwords`)."""
    saved = passwords._hasher
    passwords._hasher = PasswordHasher(time_cost=1, memory_cost=8, parallelism=1)
    passwords._dummy_hash.cache_clear()
    try:
        yield
    finally:
        passwords._hasher = saved
        passwords._dummy_hash.cache_clear()
