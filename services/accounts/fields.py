"""What an account's and a group's fields may hold (pure): a username is the person's UNIX
username on the GPU hosts, so it follows the hosts' rules."""

from __future__ import annotations

import re
from collections.abc import Mapping

from services.accounts.passwords import password_problem
from services.shared.errors import InvalidRequest

_USERNAME = re.compile(r"[a-z_][a-z0-9_-]{0,31}")
_GROUP_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
MAX_EMAIL_LENGTH = 254
MAX_DESCRIPTION_LENGTH = 500


def username_problem(username: object) -> str | None:
    """Why `username` cannot be a UNIX username on the hosts, or None."""
    if not isinstance(username, str) or not _USERNAME.fullmatch(username):
        return (
            "must be 1-32 characters: lowercase letters, digits, '_' or '-', starting with "
            "a letter or '_' (the user's UNIX username on the GPU hosts)"
        )
    return None


def email_problem(email: object) -> str | None:
    """Why `email` is not an address to write to, or None (`name@localhost` is accepted)."""
    if not isinstance(email, str) or not email:
        return "must be an e-mail address"
    if len(email) > MAX_EMAIL_LENGTH:
        return f"must be at most {MAX_EMAIL_LENGTH} characters"
    if any(ch.isspace() or not ch.isprintable() for ch in email):
        return "must not contain spaces or control characters"
    local, at, domain = email.partition("@")
    if not at or "@" in domain or not local or not domain:
        return "must be one name, one '@' and a domain (name@example.org)"
    if "." not in domain.strip(".") and domain != "localhost":
        return "must have a dot in its domain (name@example.org)"
    return None


def group_name_problem(name: object) -> str | None:
    if not isinstance(name, str) or not _GROUP_NAME.fullmatch(name):
        return (
            "must be 1-64 characters: letters, digits, '_', '.' or '-', starting with a "
            "letter or a digit"
        )
    return None


def description_problem(description: object) -> str | None:
    if not isinstance(description, str):
        return "must be text"
    if len(description) > MAX_DESCRIPTION_LENGTH:
        return f"must be at most {MAX_DESCRIPTION_LENGTH} characters"
    return None


def check_user_fields(
    *, username: object = None, email: object = None, password: object = None
) -> None:
    """InvalidRequest naming every bad field among those given (None: not checked)."""
    refuse_if(
        {
            "username": None if username is None else username_problem(username),
            "email": None if email is None else email_problem(email),
            "password": None if password is None else _password_problem(password),
        },
        "user",
    )


def _password_problem(password: object) -> str | None:
    return password_problem(password) if isinstance(password, str) else "must be text"


def refuse_if(problems: Mapping[str, str | None], what: str) -> None:
    """InvalidRequest naming every field with a problem (details: field -> reason)."""
    found = {field: reason for field, reason in problems.items() if reason}
    if found:
        reasons = "; ".join(f"{field} {reason}" for field, reason in found.items())
        raise InvalidRequest(f"invalid {what}: {reasons}", found)
