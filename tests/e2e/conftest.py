"""Fixtures of the end-to-end tests that log in to a real sshd as a person (SSH self-signup,
the check of Warden's key for a user): the person, the host's management login and the sshd.
Each module that uses them gets its own (module scope)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.sshd import Sshd
from tests.support.unix_user import UnixUser, throwaway_user


@pytest.fixture(scope="module")
def person() -> Iterator[UnixUser]:
    """A Unix user who logs in with their own keys."""
    with throwaway_user() as user:
        yield user


@pytest.fixture(scope="module")
def manager() -> Iterator[UnixUser]:
    """The host's management login (an ordinary user: it only asks `id`)."""
    with throwaway_user() as user:
        yield user


@pytest.fixture(scope="module")
def real_host(person: UnixUser, manager: UnixUser) -> Iterator[Sshd]:
    """An sshd where the person's keys come from their home, as on a real host; the management
    login's from the test sshd's own file."""
    match = [f"Match User {person.name}", "    AuthorizedKeysFile %h/.ssh/authorized_keys"]
    with Sshd(user=manager.name, extra_config=match) as server:
        yield server
