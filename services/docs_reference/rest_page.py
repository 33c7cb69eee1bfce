"""docs/reference/rest-api.md: every route of the gateway, from its OpenAPI document."""

from __future__ import annotations

from typing import Any

from services.docs_reference import header

METHODS = ("get", "post", "put", "patch", "delete")
ACCESS = {
    "public": "anyone",
    "user": "any signed-in user",
    "owner": "its owner, or an admin",
    "admin": "admins",
}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _parameters(operation: dict[str, Any]) -> str:
    names = [
        f"`{p['name']}`" + ("" if p.get("required") else "?")
        for p in operation.get("parameters", [])
        if p.get("in") == "query"
    ]
    return ", ".join(names)


def _body(operation: dict[str, Any]) -> str:
    content = operation.get("requestBody", {}).get("content", {})
    for media in content.values():
        ref = media.get("schema", {}).get("$ref", "")
        if ref:
            return f"`{ref.rsplit('/', 1)[-1]}`"
        return "JSON"
    return ""


def render() -> str:
    from services.gateway.openapi import build_spec
    from services.gateway.routes import ROUTES

    spec = build_spec(ROUTES)
    by_tag: dict[str, list[tuple[str, str, dict[str, Any]]]] = {}
    for path, operations in spec["paths"].items():
        for method in METHODS:
            if method in operations:
                op = operations[method]
                tag = (op.get("tags") or ["other"])[0]
                by_tag.setdefault(tag, []).append((method.upper(), path, op))
    lines = [
        "# REST API routes",
        "",
        "Every route of the gateway, from its OpenAPI document (`GET /api/v1/openapi.json`;",
        "`python -m services.gateway.openapi` prints it). A running gateway serves the same",
        "document as a browsable page, the Swagger UI, at `/api/v1/docs` (e.g.",
        "<http://127.0.0.1:8080/api/v1/docs>), with every parameter, body and answer schema.",
        "How to sign in, errors, paging and the live stream:",
        "[The REST API: contract, sign-in and live stream](api-guide.md).",
        "",
        "*Who*: `public` anyone; `user` any signed-in user; `owner` the owner of the thing, or an",
        "admin; `admin` admins only. Query parameters marked `?` are optional.",
        "",
    ]
    for tag in sorted(by_tag):
        lines += [f"## {tag}", "", "| method | path | who | what | query | body |"]
        lines.append("|---|---|---|---|---|---|")
        routes = sorted(by_tag[tag], key=lambda r: (r[1], METHODS.index(r[0].lower())))
        for method, path, op in routes:
            cells = [
                method,
                f"`{path}`",
                f"`{op.get('x-access', '')}`",
                _cell(op.get("summary", "")),
                _parameters(op),
                _body(op),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    text = header("the gateway's OpenAPI document (services/gateway/openapi.py)")
    return text + "\n".join(lines).rstrip() + "\n"
