"""Each service's `api.py` is its whole call contract: its handler table serves exactly the
methods it declares, each gets its arguments loaded by the method's schema, and a caller's
deadline comes from the method when it needs longer than the bus's default."""

from __future__ import annotations

from types import ModuleType
from typing import Any, cast

import pytest
from marshmallow import Schema, fields

from services.accounts import api as accounts_api
from services.jobs import api as jobs_api
from services.jobs import handlers as jobs_handlers
from services.monitor import api as monitor_api
from services.monitor import handlers as monitor_handlers
from services.notifications.serving import rpc_handlers
from services.reservations import api as reservations_api
from services.reservations import handlers as reservations_handlers
from services.shared.bus.inproc import InProcessBus
from services.shared.errors import InvalidRequest
from services.shared.rpc import Method, served
from services.violations import api as violations_api
from services.violations import handlers as violations_handlers

# Building a handler table only closes over its collaborators: none is used until a call.
NOTHING: Any = None
# The reservations service serves the accounts' methods too (they live in its process).
TABLES: list[tuple[tuple[ModuleType, ...], dict[str, Any]]] = [
    (
        (reservations_api, accounts_api),
        reservations_handlers.rpc_methods(NOTHING, NOTHING, NOTHING),
    ),
    ((monitor_api,), monitor_handlers.rpc_methods(NOTHING, NOTHING, NOTHING, NOTHING)),
    ((jobs_api,), jobs_handlers.rpc_methods(NOTHING, NOTHING)),
    (
        (violations_api,),
        violations_handlers.rpc_methods(NOTHING, NOTHING, rpc_handlers(NOTHING)),
    ),
]


@pytest.mark.parametrize(
    ("apis", "table"),
    TABLES,
    ids=lambda v: getattr(v[0], "SERVICE", "") if isinstance(v, tuple) else "",
)
def test_a_service_serves_exactly_the_methods_its_api_declares(
    apis: tuple[ModuleType, ...], table: dict[str, Any]
) -> None:
    methods = tuple(m for api in apis for m in cast(tuple[Method, ...], api.METHODS))
    assert sorted(table) == sorted(m.name for m in methods)
    assert {m.service for m in methods} == {api.SERVICE for api in apis}
    assert len({m.name for m in methods}) == len(methods)


class _Args(Schema):
    n = fields.Integer(required=True, strict=True)


ADD_ONE = Method("calc", "add_one", "n + 1", _Args)
PING = Method("calc", "ping", "no arguments")


async def _add_one(args: dict[str, Any]) -> int:
    return int(args["n"]) + 1


async def _ping(args: dict[str, Any]) -> dict[str, Any]:
    return args


async def test_served_loads_the_arguments_before_the_handler_sees_them() -> None:
    table = served((ADD_ONE, PING), {ADD_ONE: _add_one, PING: _ping})
    assert await table["add_one"]({"n": 41}) == 42
    assert await table["ping"]({}) == {}
    with pytest.raises(InvalidRequest, match="n:"):
        await table["add_one"]({"n": "41"})
    with pytest.raises(InvalidRequest):
        await table["add_one"]({"n": 1, "extra": True})


def test_served_refuses_a_table_that_does_not_match_the_api() -> None:
    with pytest.raises(ValueError, match=r"missing \['ping'\]"):
        served((ADD_ONE, PING), {ADD_ONE: _add_one})
    with pytest.raises(ValueError, match=r"not declared \['ping'\]"):
        served((ADD_ONE,), {ADD_ONE: _add_one, PING: _ping})


async def test_a_method_calls_its_service_over_the_bus_with_its_own_deadline() -> None:
    seen: list[float | None] = []
    slow = Method("calc", "slow", "takes long", timeout_s=42.0)

    class Recording(InProcessBus):
        async def call(
            self, service: str, method: str, args: Any = None, *, timeout: float | None = None
        ) -> Any:
            seen.append(timeout)
            return await super().call(service, method, args, timeout=timeout)

    bus = Recording()
    await bus.start()
    try:
        await bus.serve("calc", served((ADD_ONE, slow), {ADD_ONE: _add_one, slow: _ping}))
        assert await ADD_ONE.call(bus, {"n": 1}) == 2
        assert await slow.call(bus) == {}
        assert await slow.call(bus, timeout=3.0) == {}
    finally:
        await bus.close()
    assert seen == [None, 42.0, 3.0]
