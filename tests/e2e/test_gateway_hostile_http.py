"""Hostile requests to a running gateway: request lines over aiohttp's 8,190 bytes are
answered 400 and logged as one warning line, never a traceback each; stored text holds no
control character (a title is one line, a description may span lines)."""

from __future__ import annotations

import asyncio
import logging
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from tests.e2e.api import running_system

LONG_LINES = 40


async def raw_exchange(port: int, request: bytes) -> bytes:
    """`request` on a connection of its own; the first line of the answer."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        return await asyncio.wait_for(reader.readline(), 30)
    finally:
        writer.close()


async def test_long_request_lines_are_one_warning_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)
    async with running_system(tmp_path, hosts=1, gpus=1) as system:
        port = system.settings.gateway.port
        for n in range(LONG_LINES):
            line = b"GET /api/v1/hosts?q=" + b"x" * (8_200 + n) + b" HTTP/1.1\r\n"
            answer = await raw_exchange(port, line + b"Host: x\r\n\r\n")
            assert answer.split()[1:2] == [b"400"], answer

    about = [r for r in caplog.records if "not valid HTTP" in r.getMessage()]
    assert len(about) == 1 and about[0].levelno == logging.WARNING
    assert "LineTooLong" in about[0].getMessage() and "xxxx" not in about[0].getMessage()
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert [r.getMessage() for r in caplog.records if r.exc_info] == []


async def test_titles_are_one_line_and_no_text_is_stored_with_a_control_character(
    tmp_path: Path,
) -> None:
    async with running_system(tmp_path, hosts=1, gpus=1) as system:
        alice = await system.as_user("alice")
        gpu = (await system.gpu(0, 0))["uuid"]
        start = (datetime.now(UTC) + timedelta(hours=2)).replace(microsecond=0)

        async def book(title: str, description: str = "") -> tuple[int, object]:
            made = await alice.post(
                "/reservations",
                {
                    "gpus": [gpu],
                    "start": start.isoformat(),
                    "duration_minutes": 30,
                    "title": title,
                    "description": description,
                },
            )
            return made.status, made.body

        for title in ("cr \r x", "two\nlines", "tab\tx", "gpu\u202e0-slaunam"):
            status, body = await book(title)
            assert status == 422, (title, body)
        status, body = await book("ok", "crlf\r\nline")
        assert status == 422, body
        status, body = await book("training run", "step 1\n\tstep 2")
        assert status == 201, body
        listed = await alice.get("/reservations", owner="alice")
        assert [r["description"] for r in listed.body["items"]] == ["step 1\n\tstep 2"]
