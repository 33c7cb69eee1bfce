"""docs/reference/events-rpc.md: every event type (services/shared/contracts/) and every RPC
method of every service's public api.

The api modules are found, not listed: every `services/<package>/api.py` or
`services/<package>/api/__init__.py` (and the modules of such an `api` package), each `Method`
found in them. A service that gains an api, or methods that move from one to another, show here
once the page is written again.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

from marshmallow import Schema, fields

from services.docs_reference import header
from services.shared.rpc import Method

SERVICES_DIR = Path(__file__).resolve().parents[1]


# Field classes shown by what they hold.
NAMES = {"awaredatetime": "time", "datetime": "time", "float": "number", "str": "string"}


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def _type(field: fields.Field) -> str:
    if isinstance(field, fields.Nested):
        nested = field.nested
        name = nested.__name__ if isinstance(nested, type) else type(field.schema).__name__
        return f"{name}[]" if field.many else name
    if isinstance(field, fields.List):
        return f"list of {_type(field.inner)}"
    if isinstance(field, fields.Dict):
        return "object"
    return NAMES.get(type(field).__name__.lower(), type(field).__name__.lower())


def _fields(schema: type[Schema] | None) -> str:
    if schema is None:
        return ""
    declared = schema().fields
    shown = []
    for name, field in declared.items():
        key = field.data_key or name
        optional = "" if field.required else "?"
        shown.append(f"`{key}`{optional} {_type(field)}")
    return ", ".join(shown)


def api_modules() -> Iterator[ModuleType]:
    """Every service's public api module (and an api package's modules), by package name."""
    for package in sorted(p.name for p in SERVICES_DIR.iterdir() if p.is_dir()):
        if (SERVICES_DIR / package / "api.py").is_file():
            yield importlib.import_module(f"services.{package}.api")
        elif (SERVICES_DIR / package / "api" / "__init__.py").is_file():
            api = importlib.import_module(f"services.{package}.api")
            yield api
            for info in pkgutil.iter_modules(api.__path__):
                yield importlib.import_module(f"services.{package}.api.{info.name}")


def methods() -> dict[str, list[Method]]:
    """Every declared RPC method, by the service that serves it, each once."""
    found: dict[tuple[str, str], Method] = {}
    for module in api_modules():
        for value in vars(module).values():
            candidates = value if isinstance(value, tuple | list) else (value,)
            for item in candidates:
                if isinstance(item, Method):
                    found.setdefault((item.service, item.name), item)
    by_service: dict[str, list[Method]] = {}
    for (service, _name), method in sorted(found.items()):
        by_service.setdefault(service, []).append(method)
    return by_service


def _events() -> list[str]:
    from services.shared.contracts import EVENT_TYPES

    lines = [
        "## Events",
        "",
        "Each event is published on the exchange `<publisher>.events` with its type as the",
        "routing key, in the envelope `{id, type, version, occurred_at, source, data}`; `data`",
        "has the fields below (`?`: optional). How to consume them:",
        "[Plugins: the event contract](../developers/plugins.md).",
        "",
        "| type | version | publisher | what | data |",
        "|---|---|---|---|---|",
    ]
    for event in sorted(EVENT_TYPES, key=lambda e: (e.source, e.name, e.version)):
        cells = [
            f"`{event.name}`",
            str(event.version),
            f"`{event.source}`",
            _cell(event.description),
            _fields(event.schema),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return [*lines, ""]


def _rpc() -> list[str]:
    lines = [
        "## RPC methods",
        "",
        "Each service declares its methods in its public api (`services/<service>/api.py`):",
        "the name, the arguments (the service loads every call with this schema), the answer",
        "and the errors it may raise. Callers reach them over the bus as `<service>.<method>`",
        "with a deadline; the gateway, the CLI and the other services call a service only",
        "through its api.",
        "",
    ]
    for service, declared in methods().items():
        lines += [
            f"### {service}",
            "",
            "| method | what | arguments | answer | errors |",
            "|---|---|---|---|---|",
        ]
        for method in declared:
            answer = ""
            if method.answer is not None:
                answer = f"`{method.answer.__name__}`" + ("[]" if method.many else "")
            errors = ", ".join(f"`{e.__name__}`" for e in method.raises)
            cells = [
                f"`{method.name}`",
                _cell(method.summary),
                _fields(method.args),
                answer,
                errors,
            ]
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def render() -> str:
    lines = [
        "# Events and RPC methods",
        "",
        "What the services tell each other: the events each one publishes and the RPC methods",
        "each one serves, from their declarations.",
        "",
        *_events(),
        *_rpc(),
    ]
    text = header("services/shared/contracts/ and every services/<package>/api")
    return text + "\n".join(lines).rstrip() + "\n"
