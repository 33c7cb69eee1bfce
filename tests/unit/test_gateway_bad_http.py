"""The gateway's filter of aiohttp's errors about requests that are not HTTP: one warning
line per period, counting the rest; other errors untouched."""

from __future__ import annotations

import logging

from aiohttp.http_exceptions import BadStatusLine, LineTooLong

from services.gateway.bad_http import BadHttpFilter


def record(err: BaseException) -> logging.LogRecord:
    return logging.LogRecord(
        "warden.gateway.http",
        logging.ERROR,
        __file__,
        1,
        "Error handling request from %s",
        ("203.0.113.7",),
        (type(err), err, None),
    )


def test_bad_requests_are_one_warning_line_per_period_counting_the_rest() -> None:
    now = [0.0]
    only = BadHttpFilter(every_s=60, clock=lambda: now[0])
    first = record(LineTooLong(b"GET /\x1b[2J" + b"x" * 90, 8190))
    assert only.filter(first)
    assert first.levelno == logging.WARNING and first.exc_info is None
    assert first.getMessage() == (
        "answered 400 to a request that is not valid HTTP (LineTooLong) from 203.0.113.7"
    )
    assert [only.filter(record(BadStatusLine("junk"))) for _ in range(5)] == [False] * 5
    now[0] = 61.0
    later = record(BadStatusLine("junk"))
    assert only.filter(later)
    assert later.getMessage().endswith(
        "(BadStatusLine) from 203.0.113.7; 5 more since the last such line"
    )


def test_other_errors_pass_unchanged() -> None:
    only = BadHttpFilter(every_s=60, clock=lambda: 0.0)
    bug = record(KeyError("x"))
    assert only.filter(bug) and only.filter(record(KeyError("y")))
    assert bug.levelno == logging.ERROR and bug.exc_info is not None
