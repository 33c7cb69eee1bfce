"""An RPC handler's unexpected exception reaches its caller as an error that means an action
and names no internals: a database that cannot be reached is a 503 that passes, a value it
cannot store a 400, anything else a RemoteError pointing at the service's log."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from sqlalchemy import exc as sa

from services.shared.bus.inproc import InProcessBus
from services.shared.errors import InvalidRequest, RemoteError, ServiceUnavailable
from services.shared.failures import (
    Unreachable,
    database_unreachable,
    describe_failure,
    outage,
    rpc_error,
)

INTERNALS = "ConnectionRefusedError ('127.0.0.1', 5433) password=hunter2"


def refused() -> sa.OperationalError:
    return sa.OperationalError("SELECT 1", {}, ConnectionRefusedError(INTERNALS))


@pytest.mark.parametrize(
    ("err", "kind"),
    [
        (refused(), ServiceUnavailable),
        (ConnectionRefusedError(INTERNALS), ServiceUnavailable),
        (TimeoutError(INTERNALS), ServiceUnavailable),
        (
            sa.DataError("INSERT", {}, ValueError(f"invalid byte sequence 0x00 {INTERNALS}")),
            InvalidRequest,
        ),
        (KeyError(INTERNALS), RemoteError),
    ],
)
def test_rpc_error_means_an_action_and_names_no_internals(err: Exception, kind: type) -> None:
    error = rpc_error("reservations", "create_reservation", err)
    assert isinstance(error, kind)
    assert "5433" not in error.message and "hunter2" not in str(error.to_dict())
    assert error.details == {"service": "reservations", "method": "create_reservation"}


def test_a_connection_broken_mid_operation_by_a_restart_is_the_database_away() -> None:
    import asyncpg

    driver = asyncpg.exceptions._base.InternalClientError(
        "cannot switch to state 15; another operation (2) is in progress"
    )
    adapted = RuntimeError("the dialect's copy of it")
    adapted.__cause__ = driver
    err = sa.InternalError("SELECT channel, value FROM violations_delivery_settings", {}, adapted)
    err.__cause__ = adapted
    assert database_unreachable(err) and outage(err)
    assert not database_unreachable(sa.InternalError("SELECT 1", {}, ValueError("a bug")))


def test_describe_failure_is_a_few_words() -> None:
    assert describe_failure(refused()) == "the database is unreachable"
    assert describe_failure(KeyError(INTERNALS)) == "KeyError"


def test_an_unreachable_database_is_logged_once_a_minute_not_per_call(
    caplog: pytest.LogCaptureFixture,
) -> None:
    log = logging.getLogger("test.failures")
    unreachable = Unreachable(log)
    with caplog.at_level(logging.WARNING, logger="test.failures"):
        for _ in range(50):
            unreachable.report("reservations", refused())
    assert len(caplog.records) == 1
    assert "5433" not in caplog.text


async def test_a_caller_gets_a_503_when_the_service_cannot_reach_its_database(
    caplog: pytest.LogCaptureFixture,
) -> None:
    bus = InProcessBus()
    await bus.start()

    async def failing(_args: dict[str, Any]) -> None:
        raise refused()

    try:
        await bus.serve("reservations", {"get": failing})
        with caplog.at_level(logging.WARNING), pytest.raises(ServiceUnavailable) as caught:
            await bus.call("reservations", "get", {})
    finally:
        await bus.close()
    assert "cannot reach its database" in caught.value.message
    assert "5433" not in caught.value.message
    assert not any(record.exc_info for record in caplog.records)  # no traceback for it


def test_a_request_past_its_callers_deadline_is_dropped_by_the_service() -> None:
    import time
    from types import SimpleNamespace

    from services.shared.bus.amqp import DEADLINE_HEADER, _expired

    def request(**headers: Any) -> Any:
        return SimpleNamespace(headers=headers)

    now_ms = int(time.time() * 1000)
    assert _expired(request(**{DEADLINE_HEADER: now_ms - 1}))
    assert not _expired(request(**{DEADLINE_HEADER: now_ms + 60_000}))
    assert not _expired(request())  # an older caller's request: no deadline said, none applied
    # A float would travel as single precision (128 s apart today): never trusted.
    assert not _expired(request(**{DEADLINE_HEADER: float(now_ms - 1)}))


def test_postgresql_shutting_down_or_starting_up_is_an_outage_not_a_bug() -> None:
    import asyncpg

    for err in (
        asyncpg.exceptions.CannotConnectNowError("the database system is shutting down"),
        asyncpg.exceptions.AdminShutdownError("terminating connection"),
    ):
        wrapped = sa.DBAPIError("SELECT 1", {}, err)
        wrapped.orig = err
        assert database_unreachable(wrapped) and outage(wrapped)
        assert isinstance(rpc_error("jobs", "get_job", wrapped), ServiceUnavailable)
    # a service out of reach is an outage for an event handler (it waits, never dead-lettered)
    assert outage(ServiceUnavailable("the message bus is unavailable"))
    assert not outage(KeyError("a bug"))
