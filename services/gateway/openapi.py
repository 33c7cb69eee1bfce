"""The OpenAPI 3 document, generated (apispec) from the routes and the schemas they validate with.

Every operation documents its success answer, its error envelope (`default`), its access level
(`x-access`) and, unless public, the bearer token it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from apispec import APISpec
from apispec.ext.marshmallow import MarshmallowPlugin
from marshmallow import Schema, fields

from services.gateway.routing import API, Access, Route

DESCRIPTION = """\
The Warden API: GPU reservations, live hosts and GPUs, jobs and violations.

Sign in with `POST /api/v1/session`, then send `Authorization: Bearer <access_token>`.
Every route says who may call it in `x-access`: `public`, `user` (any signed-in user),
`owner` (the owner of the thing, or an admin) or `admin`. Times are ISO-8601 with an offset.
Errors are `{"error": CODE, "message": ..., "details": ...}`.
"""


class ErrorSchema(Schema):
    error = fields.String(required=True, metadata={"description": "machine-readable code"})
    message = fields.String(required=True)
    details = fields.Dict(required=True)


def _name_schemas(schema: type[Schema] | Schema) -> str:
    cls = schema if isinstance(schema, type) else type(schema)
    name = cls.__name__
    return name[: -len("Schema")] if name.endswith("Schema") and len(name) > 6 else name


def _operation(route: Route) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": route.handler.__name__,
        "summary": route.summary,
        "tags": [route.tag],
        "x-access": route.access.value,
    }
    if route.description:
        operation["description"] = route.description
    parameters: list[dict[str, Any]] = []
    if route.params:
        parameters.append({"in": "path", "schema": route.params})
    if route.query:
        parameters.append({"in": "query", "schema": route.query})
    if parameters:
        operation["parameters"] = parameters
    if route.body:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": route.body}},
        }
    operation["responses"] = {
        str(route.status): _success(route),
        "default": {
            "description": "an error (see `error` for the code)",
            "content": {"application/json": {"schema": ErrorSchema}},
        },
    }
    if route.access is not Access.PUBLIC:
        operation["security"] = [{"bearerAuth": []}]
    if route.conditional:
        _conditional(operation, str(route.status))
    extra = dict(route.extra)
    operation["responses"].update(extra.pop("responses", {}))
    operation.update(extra)
    return operation


def _success(route: Route) -> dict[str, Any]:
    """The route's answer when it succeeds: no content for a 204, else what it produces."""
    success: dict[str, Any] = {"description": "success"}
    if route.status != 204:
        if route.raw and route.response is None:
            success["content"] = {route.produces: {"schema": {"type": "string"}}}
        elif route.response is not None:
            schema: Any = route.response
            if route.many:
                schema = {"type": "array", "items": route.response}
            success["content"] = {"application/json": {"schema": schema}}
        else:
            success["content"] = {"application/json": {"schema": {}}}
    return success


_ETAG_HEADERS = {
    "ETag": {
        "description": "strong tag of this answer for this caller; send it back in If-None-Match",
        "schema": {"type": "string"},
    },
    "Cache-Control": {
        "description": "`no-cache`: keep the answer, but ask again (with If-None-Match)",
        "schema": {"type": "string"},
    },
}


def _conditional(operation: dict[str, Any], status: str) -> None:
    """A conditional GET (services/gateway/etag.py): If-None-Match, ETag, 304."""
    operation.setdefault("parameters", []).append(
        {
            "in": "header",
            "name": "If-None-Match",
            "required": False,
            "description": "the ETag of the answer you have: 304 while it is still the answer",
            "schema": {"type": "string"},
        }
    )
    operation["responses"][status]["headers"] = _ETAG_HEADERS
    operation["responses"]["304"] = {
        "description": "Not Modified: the answer tagged If-None-Match is still the answer "
        "(no body)",
        "headers": _ETAG_HEADERS,
    }


# The version of the API the document describes (its paths are /api/v1), not the package's:
# that one changes with every commit (setuptools-scm), and the document must not.
API_VERSION = "1.0"


def build_spec(routes: Sequence[Route]) -> dict[str, Any]:
    spec = APISpec(
        title="Warden API",
        version=API_VERSION,
        openapi_version="3.0.3",
        info={"description": DESCRIPTION},
        servers=[{"url": "/"}],
        plugins=[MarshmallowPlugin(schema_name_resolver=_name_schemas)],
    )
    spec.components.security_scheme(
        "bearerAuth", {"type": "http", "scheme": "bearer", "bearerFormat": "JWT"}
    )
    spec.components.schema("Error", schema=ErrorSchema)
    by_path: dict[str, dict[str, Any]] = {}
    for route in routes:
        by_path.setdefault(route.full_path, {})[route.method.lower()] = _operation(route)
    for path, operations in by_path.items():
        spec.path(path=path, operations=operations)
    document: dict[str, Any] = spec.to_dict()
    return document


DOCS_PAGE = """<!doctype html>
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Warden API</title>
  <link rel="stylesheet" href="{static}/swagger-ui.css">
</head>
<body>
  <div id="docs"></div>
  <script src="{static}/swagger-ui-bundle.js"></script>
  <script>
    window.ui = SwaggerUIBundle({{
      url: "{api}/openapi.json",
      dom_id: "#docs",
      deepLinking: true,
      persistAuthorization: true,
      // Render the tags only: an operation, or a schema, renders when it is opened, so the
      // page is ready in a fraction of the time the whole document takes.
      docExpansion: "none",
      defaultModelsExpandDepth: -1,
      validatorUrl: null,  // no badge fetched from validator.swagger.io: nothing leaves the lab
    }});
  </script>
</body>
</html>
"""


def docs_page() -> str:
    return DOCS_PAGE.format(static=f"{API}/docs/static", api=API)


if __name__ == "__main__":
    # `python -m services.gateway.openapi > frontend/src/api/openapi.json`: the web UI's types
    # are generated from this document (`npm run api:types`).
    import json

    from services.gateway.routes import ROUTES

    print(json.dumps(build_spec(ROUTES), indent=1, sort_keys=True))
