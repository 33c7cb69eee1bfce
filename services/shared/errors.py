"""Errors that mean an action. Each carries its reason as data so it can cross the bus.

The gateway maps `code` to an HTTP status in one table; anything else is a bug.
"""

from __future__ import annotations

from typing import Any


class WardenError(Exception):
    """Base of every error Warden reports on purpose."""

    code = "error"

    def __init__(self, message: str, details: dict[str, Any] | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.details = details or {}

    def to_dict(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "details": self.details}


class ConfigError(WardenError):
    """The configuration is invalid; `details` maps each bad key to its reason."""

    code = "config_invalid"


class ContractError(WardenError):
    """A message does not match its declared contract (unknown type, version or bad data)."""

    code = "contract_violation"


class NotFound(WardenError):
    code = "not_found"


class InvalidRequest(WardenError):
    code = "invalid_request"


class ValidationFailed(WardenError):
    """Well-formed, but a value is not acceptable (HTTP 422): a field that does not fit its
    schema (`details.errors` per field), or a GPU that is not offered (`details.reasons`)."""

    code = "validation_failed"


class Forbidden(WardenError):
    """The caller may not do this (not the owner, not an admin, too late to change it)."""

    code = "forbidden"


class AuthenticationFailed(WardenError):
    """Unknown user or wrong password: deliberately the same error for both."""

    code = "authentication_failed"


class AlreadyExists(WardenError):
    code = "already_exists"


class ReservationConflict(WardenError):
    """Another active reservation holds a requested GPU; `details.reasons` name each one."""

    code = "reservation_conflict"


class StateConflict(WardenError):
    """The thing is in a state that does not allow this now (edit a running job, say)."""

    code = "state_conflict"


class NotAllowed(WardenError):
    """The owner's access rules (or their limits) do not cover the request; reasons as data."""

    code = "not_allowed"


class ServiceUnavailable(WardenError):
    """The service asked by RPC did not answer within the deadline (or is not running)."""

    code = "service_unavailable"


class SchemaNotMigrated(WardenError):
    code = "schema_not_migrated"


class RemoteError(WardenError):
    """An RPC handler failed with an error that is not one of ours (a bug on the far side)."""

    code = "remote_error"


# Errors that may travel across RPC and be raised again on the caller's side, by code.
_BY_CODE: dict[str, type[WardenError]] = {}


def register_error(cls: type[WardenError]) -> type[WardenError]:
    """Make an error class travel over RPC under its `code` (use as a decorator)."""
    _BY_CODE[cls.code] = cls
    return cls


for _cls in (
    ContractError,
    StateConflict,
    NotFound,
    InvalidRequest,
    ValidationFailed,
    Forbidden,
    AuthenticationFailed,
    AlreadyExists,
    ReservationConflict,
    NotAllowed,
    ServiceUnavailable,
    RemoteError,
):
    register_error(_cls)


def error_from_dict(payload: dict[str, Any]) -> WardenError:
    """Rebuild an error sent by `WardenError.to_dict` on the other side of the bus."""
    cls = _BY_CODE.get(str(payload.get("code")), RemoteError)
    err = cls(str(payload.get("message", "")), payload.get("details") or {})
    if cls is RemoteError:
        err.details.setdefault("remote_code", payload.get("code"))
    return err
