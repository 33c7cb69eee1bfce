"""The versions and tags of conditional GETs (services/gateway/etag.py, CalendarView.version)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from aiohttp.test_utils import make_mocked_request

from services.gateway.auth import Caller
from services.gateway.etag import conditional, make_tag, matches
from tests.unit.test_gateway_calendar import T0, loaded, reservation

ALICE = Caller(username="alice", is_admin=False)
BOB = Caller(username="bob", is_admin=False)


def test_a_gpus_version_moves_only_with_its_own_reservations() -> None:
    view = loaded(reservation(1, ["g0"], 0, 1), reservation(2, ["g1"], 0, 1))
    g0, g1, everything = view.version(["g0"]), view.version(["g1"]), view.version()
    view.apply("reservation.created", reservation(3, ["g1"], 2, 1))
    assert view.version(["g0"]) == g0
    assert view.version(["g1"]) > g1 and view.version() > everything
    assert view.version(["g0", "g1"]) == view.version(["g1"])
    # Moved from g1 to g0: both changed.
    before = view.version(["g0"]), view.version(["g1"])
    moved = reservation(3, ["g0"], 2, 1, updated_at=(T0 + timedelta(minutes=1)).isoformat())
    view.apply("reservation.updated", moved)
    assert view.version(["g0"]) > before[0] and view.version(["g1"]) > before[1]
    # The same event again changes nothing.
    again = view.version()
    view.apply("reservation.updated", moved)
    assert view.version() == again
    # Pruned away: a change too.
    view.prune(T0 + timedelta(weeks=20))
    assert view.version(["g0"]) > again
    assert view.version(["unknown"]) == 0


def test_tags_differ_by_caller_and_by_what_they_depend_on() -> None:
    tag = make_tag(ALICE, "gpus", 7)
    assert tag == make_tag(ALICE, "gpus", 7)
    assert tag.startswith('"') and tag.endswith('"')
    assert tag != make_tag(BOB, "gpus", 7)
    assert tag != make_tag(Caller(username="alice", is_admin=True), "gpus", 7)
    assert tag != make_tag(ALICE, "gpus", 8)


@pytest.mark.parametrize(
    ("header", "hit"),
    [
        (None, False),
        ("", False),
        ('"x"', True),
        ('W/"x"', True),
        ('"y", "x"', True),
        ('"y",W/"x"', True),
        ("*", True),
        ('"y"', False),
        ("x", False),
    ],
)
def test_if_none_match_compares_weakly_and_takes_lists(header: str | None, hit: bool) -> None:
    headers = {} if header is None else {"If-None-Match": header}
    request = make_mocked_request("GET", "/api/v1/gpus", headers=headers)
    assert matches(request, '"x"') is hit
    answer = conditional(request, '"x"', lambda: b'{"a":1}')
    assert answer.headers["ETag"] == '"x"' and answer.headers["Cache-Control"] == "no-cache"
    assert (answer.status, answer.body) == ((304, None) if hit else (200, b'{"a":1}'))
