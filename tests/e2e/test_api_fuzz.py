"""Property-based fuzzing of the whole API from its own OpenAPI document (schemathesis).

Every operation of `/api/v1/openapi.json` (but the endless stream) gets a bounded number of
generated requests, valid and invalid, sent as an admin (who may reach every route) against a
running embedded system. Checks: no 5xx, every status and content type documented, every answer
matches its schema. The system runs on its own event loop in a thread, since schemathesis
drives plain synchronous requests.
"""

from __future__ import annotations

import asyncio
import json
import re
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from services.gateway.openapi import build_spec
from services.gateway.routes import ROUTES
from tests.e2e.api import API, PASSWORD, running_system

pytestmark = pytest.mark.timeout(600)

# Per operation; enough to find a crash on bad input without making the suite slow.
EXAMPLES = 12
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@dataclass
class Target:
    base: str
    token: str


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Target]:
    ready: dict[str, str] = {}
    started, stop = threading.Event(), threading.Event()
    failed: list[BaseException] = []

    async def serve(tmp_path: Path) -> None:
        async with running_system(tmp_path) as system:
            admin = await system.as_user("admin")
            await system.gpu(0, 0)  # the fleet is known: reservations have GPUs to refer to
            ready.update(base=system.base, token=str(admin.token))
            started.set()
            await asyncio.get_running_loop().run_in_executor(None, stop.wait)

    def run() -> None:
        try:
            asyncio.run(serve(tmp_path_factory.mktemp("api-fuzz")))
        except BaseException as err:
            failed.append(err)
            started.set()

    thread = threading.Thread(target=run, name="warden-under-fuzz", daemon=True)
    thread.start()
    assert started.wait(120), "the system did not start"
    if failed:
        raise failed[0]
    try:
        yield Target(ready["base"], ready["token"])
    finally:
        stop.set()
        thread.join(90)


# The document the gateway serves, built from the same routes (no server needed to collect);
# `test_the_served_document_is_this_one` proves they are the same.
DOCUMENT = build_spec(ROUTES)
schema = schemathesis.openapi.from_dict(DOCUMENT).exclude(path=f"{API}/stream")


@schema.parametrize()
@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=list(HealthCheck),
    phases=[Phase.explicit, Phase.generate],
    derandomize=True,
)
def test_no_request_breaks_the_api_or_its_contract(case: schemathesis.Case, target: Target) -> None:
    headers = {"Authorization": f"Bearer {target.token}"}
    if case.path == f"{API}/session" and case.method == "POST":
        headers = {}  # login: the generated credentials are the point
    case.call_and_validate(base_url=target.base, headers=headers, checks=CHECKS, timeout=60)


def test_the_served_document_is_this_one(target: Target) -> None:
    with urllib.request.urlopen(target.base + API + "/openapi.json") as answer:
        assert json.load(answer) == json.loads(json.dumps(DOCUMENT))


def test_the_document_describes_every_operation_with_its_access_level() -> None:
    document = DOCUMENT
    assert document["openapi"].startswith("3.")
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = f"{method.upper()} {path}"
            assert operation["x-access"] in ("public", "user", "owner", "admin"), where
            assert ("security" in operation) == (operation["x-access"] != "public"), where
            assert "default" in operation["responses"], where
    assert PASSWORD not in json.dumps(document)


# What no field may hold, written as raw JSON text (a lone surrogate cannot be a Python str
# that json.dumps would write): NUL, a lone surrogate, an escape sequence, a bell.
HOSTILE_JSON = ['"a\\u0000b"', '"x\\ud800"', '"\\u001b[2J\\u001b[31mPWNED"', '"\\u0007"']
HOSTILE_URL = ["%00", "a%00b", "%1B%5B2J", "%ED%A0%80"]
DEEP = "[" * 1000 + "]" * 1000


def _send(target: Target, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(
        target.base + path,
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {target.token}", "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:
            return answer.status, answer.headers.get_content_type()
    except urllib.error.HTTPError as err:
        return err.code, err.headers.get_content_type()


def _path(route: Any, value: str = "1") -> str:
    return API + re.sub(r"\{[a-z_]+\}", value, route.path)


def _hostile_requests() -> Iterator[tuple[Any, str, str, bytes | None]]:  # noqa: C901 - one kind of hostile request per branch
    for route in ROUTES:
        if route.produces == "text/event-stream":
            continue
        if route.body is not None:
            yield route, route.method, _path(route), ('{"x": ' + DEEP + "}").encode()
            for name in route.body().fields:
                for value in HOSTILE_JSON:
                    body = ("{" + f'"{name}": {value}' + "}").encode()
                    yield route, route.method, _path(route), body
        if route.params is not None:
            for value in HOSTILE_URL:
                yield route, route.method, _path(route, value), None
        if route.query is not None:
            for name in route.query().fields:
                for value in HOSTILE_URL:
                    yield route, route.method, f"{_path(route)}?{name}={value}", None


def test_nesting_nul_surrogates_and_control_characters_never_give_a_5xx(target: Target) -> None:
    """Every route with a body, path parameters or a query, each hostile value in each field:
    the cases the generator above rarely draws."""
    broken = []
    for route, method, path, body in _hostile_requests():
        status, content_type = _send(target, method, path, body)
        # A refusal is JSON; an answer is in the route's own type (`/reports/usage.csv` is CSV:
        # `%ED%A0%80`, not UTF-8, reaches it as three U+FFFD, a name nobody has).
        expected = "application/json" if status >= 400 else route.produces
        if status >= 500 or content_type != expected:
            broken.append((method, path[:80], (body or b"")[:60], status, content_type))
    assert broken == []
