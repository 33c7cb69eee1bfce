"""Declared routes: who may call each one, what it takes, what it answers.

A `Route` names its access level (public / user / owner / admin) and the marshmallow schemas of
its path, query and body. One wrapper authenticates, checks the level, validates every input
with those schemas and turns the handler's answer into JSON; the OpenAPI document is generated
from the same declarations (`openapi.py`), so the contract cannot drift from what is enforced.

`owner` routes need a signed-in user; whether that user owns the thing is decided where the
thing lives (the owning service, given the actor), and an admin passes too.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from aiohttp import web
from marshmallow import Schema, ValidationError, fields, validate

from services.gateway.auth import MUST_CHANGE, PASSWORD_ROUTES, Caller, Revocations, TokenIssuer
from services.gateway.inputs import text_problems
from services.shared import fastjson
from services.shared.bus import Bus
from services.shared.config import Settings
from services.shared.errors import AuthenticationFailed, Forbidden, ValidationFailed, WardenError
from services.shared.rpc import Answer, Method

API = "/api/v1"


class Access(StrEnum):
    PUBLIC = "public"
    USER = "user"
    OWNER = "owner"
    ADMIN = "admin"


class AuthenticationRequired(WardenError):
    code = "authentication_required"


class InvalidJson(WardenError):
    code = "invalid_json"


class Page(Schema):
    """Paging of a list that grows: `limit` (1-500, default 50) and `offset`."""

    limit = fields.Integer(load_default=50, validate=validate.Range(min=1, max=500))
    offset = fields.Integer(load_default=0, validate=validate.Range(min=0, max=10_000_000))


def page_of(items: list[Any], total: int, query: Mapping[str, Any]) -> dict[str, Any]:
    return {"items": items, "total": total, "limit": query["limit"], "offset": query["offset"]}


def page_schema(item: type[Schema]) -> type[Schema]:
    """The answer schema of a page of `item`: `{items, total, limit, offset}`."""
    name = item.__name__.removesuffix("Schema") + "PageSchema"
    return type(
        name,
        (Answer,),
        {
            "items": fields.List(fields.Nested(item), required=True),
            "total": fields.Integer(required=True),
            "limit": fields.Integer(required=True),
            "offset": fields.Integer(required=True),
        },
    )


@dataclass
class Call:
    """One request as a handler sees it: validated inputs, the caller, the bus."""

    request: web.Request
    caller: Caller | None
    params: dict[str, Any]
    query: dict[str, Any]
    body: dict[str, Any]
    bus: Bus
    settings: Settings

    @property
    def user(self) -> Caller:
        assert self.caller is not None, "only for routes that need a signed-in caller"
        return self.caller

    def actor(self) -> dict[str, Any]:
        """The caller as the services take it: `actor` (and `admin`, for the jobs service)."""
        return {"actor": self.user.username, "admin": self.user.is_admin}

    async def rpc(
        self, method: Method, args: Mapping[str, Any] | None = None, timeout: float | None = None
    ) -> Any:
        """Call a service's method as its api declares it."""
        return await method.call(self.bus, args, timeout=timeout)

    async def rpc_answer(
        self, method: Method, args: Mapping[str, Any] | None = None
    ) -> web.Response:
        """The service's answer, as the JSON it is, as this route's answer (a `raw` route
        that passes it on unchanged: no objects built from it only to be encoded again)."""
        body = await method.call_json(self.bus, args)
        return web.Response(body=body, content_type="application/json", charset="utf-8")


Handler = Callable[[Call], Awaitable[Any]]


@dataclass(frozen=True)
class Route:
    method: str
    path: str  # under API, aiohttp style: "/reservations/{id}"
    handler: Handler
    access: Access
    summary: str
    tag: str
    params: type[Schema] | None = None
    query: type[Schema] | None = None
    body: type[Schema] | None = None
    # The answer's schema; a list of them is `many=True`. None: no JSON schema documented.
    response: type[Schema] | None = None
    many: bool = False
    status: int = 200
    # The handler answers itself (a stream, cached JSON bytes); `response`, when given, still
    # documents what it sends.
    raw: bool = False
    produces: str = "application/json"
    description: str = ""
    extra: dict[str, Any] = field(default_factory=dict)
    # Answers with an ETag and 304 to If-None-Match (services/gateway/etag.py; documented
    # in the OpenAPI document from this flag).
    conditional: bool = False

    @property
    def full_path(self) -> str:
        return API + self.path


# Cache of verified access tokens: verifying a JWT on every request costs more than the rest
# of a cached read. A hit counts only until the token's own expiry.
_TOKEN_CACHE_SIZE = 10_000


class Authenticator:
    def __init__(self, issuer: TokenIssuer, revocations: Revocations | None = None) -> None:
        self.issuer = issuer
        self.revocations = revocations or Revocations(issuer.ttl_s)
        self._cache: dict[str, Caller] = {}

    def caller(self, request: web.Request, *, allow_query: bool = False) -> Caller | None:
        header = request.headers.get("Authorization", "")
        token = ""
        if header:
            scheme, _, token = header.partition(" ")
            if scheme.lower() != "bearer" or not token.strip():
                raise AuthenticationFailed("use the header `Authorization: Bearer <token>`")
            token = token.strip()
        elif allow_query:
            # EventSource cannot set headers: the stream also takes the token as a parameter.
            token = request.query.get("access_token", "")
        if not token:
            return None
        found = self._cache.get(token)
        if found is None or found.expires_at <= time.time():
            found = self.issuer.verify(token)  # an expired one raises here, as any bad token
            if len(self._cache) >= _TOKEN_CACHE_SIZE:
                self._cache.clear()
            self._cache[token] = found
        if self.revocations.revoked(found):
            raise AuthenticationFailed("this sign-in has ended (signed out, or a new password)")
        return found


def _query_dict(schema: Schema, request: web.Request) -> dict[str, Any]:
    raw: dict[str, Any] = {}
    for key in request.query:
        if key == "access_token":
            continue  # the stream's token (never validated as data, never echoed)
        declared = schema.fields.get(key)
        if isinstance(declared, fields.List):
            values = request.query.getall(key)
            # `gpus=a,b` and `gpus=a&gpus=b` both work.
            raw[key] = [part for value in values for part in value.split(",") if part]
        else:
            raw[key] = request.query.getone(key)
    return raw


def _validate(schema: Schema, data: Any, where: str) -> dict[str, Any]:
    problems = text_problems(data)
    if problems:
        raise ValidationFailed(
            f"invalid {where}: " + _summary({k: [v] for k, v in problems.items()}),
            {"in": where, "errors": {k: [v] for k, v in problems.items()}},
        )
    try:
        loaded: dict[str, Any] = schema.load(data)
    except ValidationError as err:
        messages = err.normalized_messages()
        raise ValidationFailed(
            f"invalid {where}: " + _summary(messages), {"in": where, "errors": messages}
        ) from err
    return loaded


def _summary(messages: Mapping[str, Any] | Any) -> str:
    if not isinstance(messages, Mapping):
        return str(messages)
    parts = []
    for key, value in list(messages.items())[:3]:
        text = value[0] if isinstance(value, list) and value and isinstance(value[0], str) else ""
        parts.append(f"{key}: {text}".rstrip(": ") if text else str(key))
    return "; ".join(parts)


async def _json_body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw.strip():
        return {}
    try:
        return fastjson.loads(raw.decode("utf-8"))
    except ValueError as err:  # UnicodeDecodeError is one
        raise InvalidJson(f"the request body is not valid JSON: {err}") from err
    except RecursionError as err:
        raise InvalidJson("the request body is nested too deep") from err


def json_answer(data: Any, status: int = 200) -> web.Response:
    """`web.json_response` with orjson: the same headers, the same value."""
    return web.Response(
        body=fastjson.dumps(data), status=status, content_type="application/json", charset="utf-8"
    )


# Queries that validated, per route, by their text: a page polling the same URL has it
# validated once (a query's validation depends on its text alone). All dropped at this many;
# a query longer than QUERY_KEPT_CHARS is validated every time and never kept (the texts are
# chosen by whoever sends them: kept, 1,024 request lines of 8 KB each on every route).
QUERIES_KEPT = 256
QUERY_KEPT_CHARS = 512


def _query_loader(schema: Schema) -> Callable[[web.Request], dict[str, Any]]:
    known: dict[str, dict[str, Any]] = {}

    def load(request: web.Request) -> dict[str, Any]:
        text = request.query_string
        loaded = known.get(text)
        if loaded is None:
            loaded = _validate(schema, _query_dict(schema, request), "query")
            if len(text) <= QUERY_KEPT_CHARS:
                if len(known) >= QUERIES_KEPT:
                    known.clear()
                known[text] = loaded
        return dict(loaded)  # the handler's own (values are not changed in place)

    return load


def wrap(
    route: Route, authenticator: Authenticator, bus: Bus, settings: Settings
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    """The aiohttp handler of a route: auth, access level, validation, JSON answer."""
    params_schema = route.params() if route.params else None
    load_query = _query_loader(route.query()) if route.query else None
    body_schema = route.body() if route.body else None
    needs_user = route.access is not Access.PUBLIC
    streams = route.raw and route.produces == "text/event-stream"
    password_route = (route.method, route.path) in PASSWORD_ROUTES

    async def handle(request: web.Request) -> web.StreamResponse:
        caller = authenticator.caller(request, allow_query=streams)
        if needs_user and caller is None:
            raise AuthenticationRequired("sign in first: POST /api/v1/session")
        if route.access is Access.ADMIN and not (caller and caller.is_admin):
            raise Forbidden("only admins may do this")
        if caller and caller.must_change_password and needs_user and not password_route:
            raise Forbidden(MUST_CHANGE, {"password": "change required"})
        params = _validate(params_schema, dict(request.match_info), "path") if params_schema else {}
        query = load_query(request) if load_query else {}
        body: dict[str, Any] = {}
        if body_schema is not None:
            raw = await _json_body(request)
            if not isinstance(raw, dict):
                raise ValidationFailed(
                    "the request body must be a JSON object", {"in": "body", "errors": {}}
                )
            body = _validate(body_schema, raw, "body")
        call = Call(request, caller, params, query, body, bus, settings)
        answer = await route.handler(call)
        if route.raw:
            assert isinstance(answer, web.StreamResponse)
            return answer
        if route.status == 204:
            return web.Response(status=204)
        return json_answer(answer, route.status)

    handle.__name__ = route.handler.__name__
    return handle
