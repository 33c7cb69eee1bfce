"""Text no field may hold is refused at the gateway's edge with the field it is in (422),
before any schema, service or database sees it; so are bodies nested too deep and paths no
file can have. Nothing of it may give a 5xx."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer, make_mocked_request
from marshmallow import Schema, fields

from services.gateway.app import create_app
from services.gateway.inputs import MAX_DEPTH, text_problems
from services.gateway.routing import ValidationFailed, _query_loader
from services.shared.bus.inproc import InProcessBus
from services.shared.config import GatewaySettings, Settings


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"title": "a\x00b"}, "title", "NUL"),
        ({"title": "\x1b[2J\x1b[31mPWNED"}, "title", "control characters (U+001B)"),
        ({"title": "bell\x07"}, "title", "control"),
        ({"title": "c1\x9b"}, "title", "control"),
        ({"title": "x\ud800"}, "title", "lone surrogate"),
        ({"tasks": [{"command": "ok"}, {"env": {"A": "\x00"}}]}, "tasks[1].env.A", "NUL"),
        ({"gpus": ["dgx1:0", "\x7f"]}, "gpus[1]", "control"),
        ({"bad\x00key": 1}, "(a key)", "NUL"),
    ],
)
def test_text_problems_name_the_field(data: Any, field: str, words: str) -> None:
    problems = text_problems(data)
    assert list(problems) == [field]
    assert words in problems[field]


def test_multiline_fields_take_line_feeds_and_tabs_and_any_printable_text_passes() -> None:
    data = {
        "description": "line 1\n\tline 2\n",
        "tasks": [{"command": "cd /data\npython train.py"}],
        "title": "Zürich 训练 🚀 a\u200db",  # a zero-width joiner is printable text
    }
    assert text_problems(data) == {}


@pytest.mark.parametrize(
    ("data", "field", "words"),
    [
        ({"title": "cr \r x"}, "title", "control characters (U+000D)"),
        ({"title": "two\nlines"}, "title", "one line (U+000A"),
        ({"name": "tab\there"}, "name", "one line (U+0009"),
        ({"title": "invoice\u202efdp.exe"}, "title", "bidi controls or line separators (U+202E)"),
        ({"title": "isolate\u2066x"}, "title", "bidi"),
        ({"title": "ls\u2028x"}, "title", "U+2028"),
        ({"description": "crlf\r\nx"}, "description", "control characters (U+000D)"),
        ({"description": "flipped\u202ex"}, "description", "U+202E"),
        ({"tasks": [{"env": {"A": "x\ny"}}]}, "tasks[0].env.A", "one line"),
        ({"key\twith tab": 1}, "(a key)", "one line"),
    ],
)
def test_one_line_fields_refuse_line_breaks_and_no_field_takes_cr_or_bidi_controls(
    data: Any, field: str, words: str
) -> None:
    problems = text_problems(data)
    assert list(problems) == [field]
    assert words in problems[field]


def test_nesting_deeper_than_the_limit_is_a_problem_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(100_000):  # far past Python's recursion limit
        deep = [deep]
    problems = text_problems({"x": deep})
    assert len(problems) == 1
    assert f"deeper than {MAX_DEPTH}" in next(iter(problems.values()))


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    bus = InProcessBus()
    await bus.start()
    async with TestClient(TestServer(create_app(Settings(dev=True), bus))) as c:
        yield c
    await bus.close()


async def login_body(client: TestClient[Any, Any], body: bytes) -> tuple[int, dict[str, Any]]:
    answer = await client.post(
        "/api/v1/session", data=body, headers={"Content-Type": "application/json"}
    )
    return answer.status, await answer.json()


async def test_a_nul_in_a_body_is_a_422_naming_the_field(client: TestClient[Any, Any]) -> None:
    status, body = await login_body(
        client, json.dumps({"username": "a\x00b", "password": "x"}).encode()
    )
    assert status == 422
    assert body["error"] == "validation_failed"
    assert "username" in body["details"]["errors"]


async def test_a_carriage_return_in_a_username_is_a_422(client: TestClient[Any, Any]) -> None:
    status, body = await login_body(client, b'{"username": "cr \\r x", "password": "x"}')
    assert (status, body["error"]) == (422, "validation_failed")
    assert "U+000D" in body["details"]["errors"]["username"][0]


async def test_a_lone_surrogate_in_a_body_is_a_422(client: TestClient[Any, Any]) -> None:
    status, body = await login_body(client, b'{"refresh_token": "\\ud800"}')
    assert (status, body["error"]) == (422, "validation_failed")


async def test_json_nested_a_thousand_deep_is_refused_not_a_500(
    client: TestClient[Any, Any],
) -> None:
    for depth in (1000, 100_000):
        nested = "[" * depth + "]" * depth
        status, body = await login_body(client, ('{"username": ' + nested + "}").encode())
        assert status in (400, 422), body
        assert body["error"] in ("invalid_json", "validation_failed")


async def test_a_nul_in_a_path_parameter_is_a_422(client: TestClient[Any, Any]) -> None:
    # /users/{username} needs a caller: the 401 comes first; the path check must not 500.
    answer = await client.get("/api/v1/users/%00")
    assert answer.status in (401, 422)


@pytest.mark.parametrize("path", ["/index.html%00.png", "/" + "a/" * 3000, "/" + "b" * 300])
async def test_paths_no_file_can_have_give_the_page_not_a_500(tmp_path: Path, path: str) -> None:
    (tmp_path / "index.html").write_text("<!doctype html><title>Warden</title>")
    settings = Settings(gateway=GatewaySettings(frontend_dir=str(tmp_path)), dev=True)
    bus = InProcessBus()
    await bus.start()
    try:
        async with TestClient(TestServer(create_app(settings, bus))) as client:
            answer = await client.get(path)
            assert answer.status == 200
            assert "Warden" in await answer.text()
    finally:
        await bus.close()


def test_a_query_that_validated_is_kept_by_its_text_and_a_bad_one_is_refused_every_time() -> None:
    loads: list[str] = []

    class Counted(Schema):
        n = fields.Integer(required=True)

        def load(self, data: Any, **kwargs: Any) -> Any:
            loads.append(data.get("n"))
            return super().load(data, **kwargs)

    load = _query_loader(Counted())
    first = load(make_mocked_request("GET", "/x?n=1"))
    first["n"] = 99  # the handler's own copy
    assert load(make_mocked_request("GET", "/x?n=1")) == {"n": 1}
    assert loads == ["1"]  # validated once
    for _ in range(2):
        with pytest.raises(ValidationFailed):
            load(make_mocked_request("GET", "/x?n=one"))
    assert loads == ["1", "one", "one"]


def test_a_long_query_is_validated_each_time_and_never_kept() -> None:
    from services.gateway.routing import QUERY_KEPT_CHARS

    loads: list[str] = []

    class Counted(Schema):
        name = fields.String(required=True)

        def load(self, data: Any, **kwargs: Any) -> Any:
            loads.append(data.get("name"))
            return super().load(data, **kwargs)

    load = _query_loader(Counted())
    long_name = "x" * QUERY_KEPT_CHARS
    for _ in range(2):
        assert load(make_mocked_request("GET", f"/x?name={long_name}")) == {"name": long_name}
    assert loads == [long_name, long_name]  # chosen by the caller: nothing kept of it
