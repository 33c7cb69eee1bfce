"""What an unexpected exception means for a caller, in words that reveal no internals.

An RPC handler that fails with something other than a `WardenError` is answered through
`rpc_error`: a database that cannot be reached is `ServiceUnavailable` (503, it comes back by
itself), a value the database cannot store is `InvalidRequest` (400), anything else is a
`RemoteError` (a bug: the details are in the service's log, never in the answer). Driver
messages name hosts, ports and SQL; they stay in the log.
"""

from __future__ import annotations

import logging
import os
import time

from sqlalchemy import exc as sa

from services.shared.errors import InvalidRequest, RemoteError, ServiceUnavailable, WardenError


def database_unreachable(err: BaseException) -> bool:
    """Is `err` a database that is down, refusing, or gone in the middle of a transaction?"""
    # SQLSTATE 57P01-57P05: PostgreSQL shutting down, starting up or restarting ("the database
    # system is shutting down"): the server is away for a moment, as when it refuses.
    state = getattr(getattr(err, "orig", None), "sqlstate", None) or getattr(err, "sqlstate", None)
    if isinstance(state, str) and state.startswith("57P"):
        return True
    if isinstance(err, sa.DBAPIError):
        return (
            err.connection_invalidated
            or isinstance(err, sa.OperationalError | sa.InterfaceError)
            or _protocol_broken(err)
        )
    if isinstance(err, sa.TimeoutError):  # no connection from the pool in time
        return True
    # Connecting raises ConnectionError (refused, reset) or times out; asyncpg has its own.
    return isinstance(err, ConnectionError | TimeoutError) or (
        type(err).__module__.startswith("asyncpg") and "Connection" in type(err).__name__
    )


def _protocol_broken(err: BaseException) -> bool:
    """asyncpg's "cannot switch to state ...; another operation is in progress": a pooled
    connection whose server went away in the middle of an operation (seen as PostgreSQL
    restarts), not a fault of the statement."""
    inner: BaseException | None = err
    while inner is not None:
        if type(inner).__module__.startswith("asyncpg") and type(inner).__name__ == (
            "InternalClientError"
        ):
            return True
        inner = inner.__cause__
    return False


def outage(err: BaseException) -> bool:
    """Did an event handler fail for want of a server, not because of its message? Its
    database is unreachable, or a service it asked is (the bus reconnecting, a leader being
    replaced): the message waits with back-off and goes again, never dead-lettered for it."""
    return database_unreachable(err) or isinstance(err, ServiceUnavailable)


def describe_failure(err: BaseException) -> str:
    """A few words for a log line: what failed, without a traceback or connection strings."""
    if database_unreachable(err):
        return "the database is unreachable"
    if isinstance(err, WardenError):
        return err.message
    return type(err).__name__


def database_reason(err: BaseException) -> str | None:
    """Why the database could not be used, in the driver's own first line ("database "x" does
    not exist", "connection refused"), with no URL; None when `err` is not the database's."""
    if not (isinstance(err, sa.DBAPIError) or database_unreachable(err)):
        return None
    inner = err
    while inner.__cause__ is not None:  # SQLAlchemy's wrappers, down to the driver's error
        inner = inner.__cause__
    if isinstance(inner, OSError) and inner.errno:
        return os.strerror(inner.errno).lower()
    if isinstance(inner, TimeoutError):
        return "it did not answer in time"
    lines = str(inner).strip().splitlines()
    return lines[0] if lines else type(inner).__name__


def rpc_error(service: str, method: str, err: Exception) -> WardenError:
    """The error a caller of `service.method` gets for an exception that is not ours."""
    where = {"service": service, "method": method}
    if database_unreachable(err):
        return ServiceUnavailable(f"{service} cannot reach its database; try again shortly", where)
    if isinstance(err, sa.DataError):
        return InvalidRequest(f"{service}.{method}: a value the database cannot store", where)
    return RemoteError(f"{service}.{method} failed; see the {service} service's log", where)


class Unreachable:
    """Logs an unreachable database once a minute at most, not once per failed call."""

    def __init__(self, log: logging.Logger, every_s: float = 60.0) -> None:
        self.log = log
        self.every_s = every_s
        self._last = -every_s

    def report(self, service: str, err: BaseException) -> None:
        now = time.monotonic()
        if now - self._last >= self.every_s:
            self._last = now
            self.log.warning("%s: %s (%s)", service, describe_failure(err), type(err).__name__)


def log_rpc_failure(
    log: logging.Logger, unreachable: Unreachable, service: str, method: str, err: Exception
) -> WardenError:
    """Log an RPC handler's unexpected exception (a bug: with its traceback; a dead database:
    one line a minute) and return what the caller gets."""
    if database_unreachable(err):
        unreachable.report(service, err)
    else:
        log.error("RPC %s.%s failed", service, method, exc_info=err)
    return rpc_error(service, method, err)


class Retrying:
    """A loop that keeps trying something (a tick, a flush): one log line when it starts to
    fail and one when it works again, not one per turn, and a growing wait in between so a
    dead database is no busy loop. A failure that is not an outage (a bug: not a database or
    a service out of reach, see `outage`) is logged with its traceback, once.

        retrying = Retrying(log, "publishing the outbox", first_wait_s=0.5)
        while True:
            try:
                await work()
            except Exception as err:
                await asyncio.sleep(retrying.failed(err))
                continue
            retrying.succeeded()
    """

    def __init__(
        self, log: logging.Logger, what: str, first_wait_s: float = 0.5, max_wait_s: float = 30.0
    ) -> None:
        self.log = log
        self.what = what
        self.first_wait_s = first_wait_s
        self.max_wait_s = max_wait_s
        self.failing_since: float | None = None
        self._wait_s = 0.0

    @property
    def failing(self) -> bool:
        return self.failing_since is not None

    def failed(self, err: BaseException) -> float:
        """Note a failure; returns how long to wait before the next try."""
        if self.failing_since is None:
            self.failing_since = time.monotonic()
            self._wait_s = self.first_wait_s
            self.log.warning(
                "%s failed (%s); retrying with back-off",
                self.what,
                describe_failure(err),
                exc_info=None if outage(err) else err,
            )
        else:
            self._wait_s = min(self._wait_s * 2, self.max_wait_s)
        return self._wait_s

    def succeeded(self) -> None:
        if self.failing_since is not None:
            down_s = time.monotonic() - self.failing_since
            self.log.info("%s works again (after %.0fs)", self.what, down_s)
            self.failing_since = None


class ConsumerOutages:
    """`Retrying` per queue, for event handlers whose database is down: the message waits and
    goes again; one log line per queue when it starts and one when it works again."""

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self._queues: dict[str, Retrying] = {}

    def failed(self, queue: str, err: BaseException) -> float:
        retrying = self._queues.get(queue)
        if retrying is None:
            retrying = self._queues[queue] = Retrying(self.log, f"handling events of {queue}")
        return retrying.failed(err)

    def succeeded(self, queue: str) -> None:
        retrying = self._queues.pop(queue, None)
        if retrying is not None:
            retrying.succeeded()
