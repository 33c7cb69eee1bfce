"""A service's public call contract, as its `api.py` declares it.

Each service's `api.py` lists its RPC methods as `Method`s: the service and method name, the
schema of the arguments (the service validates with it; the gateway builds its request bodies
from it), the schema of the answer, and the errors it raises. The gateway, the CLI and other
services learn from `api.py` alone how to call a service; nothing else of a service is
imported across services (import-linter checks it, see `.importlinter`).

A service serves its methods with `served(api.METHODS, {api.X: handler, ...})`: each handler
gets its arguments loaded by the method's schema, and a method of the api left unserved, or a
handler for a method the api does not declare, stops the service at start-up instead of
failing a caller later.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from marshmallow import INCLUDE, Schema

from services.shared.bus import Bus, RpcHandler
from services.shared.errors import WardenError
from services.shared.validation import load_args


class Answer(Schema):
    """Base of answer schemas: they document what comes back and allow fields added later."""

    class Meta:
        unknown = INCLUDE


@dataclass(frozen=True)
class Method:
    """One RPC method of a service."""

    service: str
    name: str
    summary: str
    args: type[Schema] | None = None  # None: it takes no arguments
    answer: type[Schema] | None = None  # None: not documented (a free-form dict)
    many: bool = False  # the answer is a list of `answer`
    raises: tuple[type[WardenError], ...] = ()
    # The caller's deadline when the method needs longer than the bus's default (one that logs
    # in to hosts over SSH); None: `bus.rpc_timeout_s`.
    timeout_s: float | None = None

    def load(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """The arguments validated and loaded; InvalidRequest names each bad field."""
        if self.args is None:
            return {}
        return load_args(_schema(self.args), dict(args))

    async def call(
        self, bus: Bus, args: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> Any:
        deadline = timeout if timeout is not None else self.timeout_s
        return await bus.call(self.service, self.name, dict(args or {}), timeout=deadline)

    async def call_json(
        self, bus: Bus, args: Mapping[str, Any] | None = None, *, timeout: float | None = None
    ) -> bytes:
        """`call`, the answer as JSON text (`Bus.call_json`)."""
        deadline = timeout if timeout is not None else self.timeout_s
        return await bus.call_json(self.service, self.name, dict(args or {}), timeout=deadline)


@functools.cache
def _schema(schema: type[Schema]) -> Schema:
    """One instance per schema: building one copies every field (a tenth of a small call)."""
    return schema()


def methods_of(service: str) -> Callable[..., Method]:
    """Declares a service's methods: `method = methods_of("jobs")`, then
    `method("start_job", "Start ...", JobArgs, raises=...)`."""
    return functools.partial(Method, service)


def served(
    methods: Iterable[Method], handlers: Mapping[Method, RpcHandler]
) -> dict[str, RpcHandler]:
    """The handler table by method name: exactly the api's methods, each with its handler,
    which gets its arguments loaded by the method's schema (never unchecked)."""
    declared = set(methods)
    missing = sorted(m.name for m in declared - set(handlers))
    unknown = sorted(m.name for m in set(handlers) - declared)
    if missing or unknown:
        raise ValueError(
            f"handlers do not match the api: missing {missing}, not declared {unknown}"
        )
    return {method.name: _loading(method, handler) for method, handler in handlers.items()}


def _loading(method: Method, handler: RpcHandler) -> RpcHandler:
    async def handle(args: dict[str, Any]) -> Any:
        return await handler(method.load(args))

    handle.__doc__ = method.summary
    return handle
