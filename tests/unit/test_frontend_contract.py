"""The web UI is typed against the gateway's OpenAPI document and listens for the stream's
event types: both are copies in frontend/, kept in step with the Python side here."""

from __future__ import annotations

import json
import re
from pathlib import Path

from services.gateway.openapi import build_spec
from services.gateway.routes import ROUTES
from services.gateway.stream import SUBSCRIPTIONS
from services.shared.contracts import EVENT_TYPES

FRONTEND = Path(__file__).resolve().parents[2] / "frontend"


def test_the_web_uis_openapi_copy_is_current() -> None:
    copy = json.loads((FRONTEND / "src" / "api" / "openapi.json").read_text())
    assert copy == json.loads(json.dumps(build_spec(ROUTES))), (
        "frontend/src/api/openapi.json is stale: run `make api-types` and commit the result"
    )


def _streamed_types() -> set[str]:
    streamed = set()
    for source, pattern, _topic in SUBSCRIPTIONS:
        prefix = pattern.removesuffix("*")
        for event in EVENT_TYPES:
            name_matches = event.name == pattern or (
                pattern.endswith("*") and event.name.startswith(prefix)
            )
            if event.source == source and name_matches:
                streamed.add(event.name)
    return streamed


def test_the_web_ui_listens_for_every_streamed_event_type() -> None:
    text = (FRONTEND / "src" / "stream.ts").read_text()
    block = text[text.index("export const EVENT_TYPES") :]
    block = block[: block.index("] as const")]
    listened = set(re.findall(r"'([a-z_]+\.[a-z_]+)'", block))
    streamed = _streamed_types()
    assert streamed  # the gateway streams something
    assert listened == streamed


def test_every_operation_has_its_own_id() -> None:
    # openapi-typescript types an operation by its id: two routes sharing one get one answer type.
    ids = [
        operation["operationId"]
        for path in build_spec(ROUTES)["paths"].values()
        for operation in path.values()
    ]
    assert sorted(ids) == sorted(set(ids))
