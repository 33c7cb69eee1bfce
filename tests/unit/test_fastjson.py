"""services.shared.fastjson writes and reads the values the standard library's json does."""

from __future__ import annotations

import dataclasses
import json
import math
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from services.shared import fastjson
from services.shared.contracts import make_envelope, parse_envelope

SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),  # beyond 64 bits too
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(),  # lone surrogates too
)
KEYS = st.one_of(st.text(), st.integers(min_value=-(2**70), max_value=2**70), st.booleans())
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=5),
        st.tuples(inner, inner),
        st.dictionaries(KEYS, inner, max_size=5),
    ),
    max_leaves=30,
)


@settings(max_examples=500, deadline=None)
@given(VALUES)
def test_dumps_writes_the_value_json_writes(value: Any) -> None:
    ours = fastjson.dumps(value)
    assert isinstance(ours, bytes)
    assert json.loads(ours) == json.loads(json.dumps(value))
    assert fastjson.dumps_text(value) == ours.decode()


@settings(max_examples=500, deadline=None)
@given(VALUES, st.booleans(), st.booleans())
def test_loads_reads_the_value_json_reads(value: Any, ascii_only: bool, as_text: bool) -> None:
    text = json.dumps(value, ensure_ascii=ascii_only, indent=None if ascii_only else 1)
    raw: str | bytes = text if as_text else text.encode("utf-8", "surrogatepass")
    try:
        expected = json.loads(raw)
    except ValueError as err:  # bytes with a lone surrogate are not UTF-8: json refuses them
        with pytest.raises(ValueError):
            fastjson.loads(raw)
        assert not as_text, err
        return
    assert fastjson.loads(raw) == expected


@pytest.mark.parametrize(
    "text",
    [
        "123456789012345678901234567890",  # orjson would read a float
        "-9223372036854775809",
        "18446744073709551616",
        "[1e400, -1e400]",  # json reads infinities
        "NaN",
        '"\\ud800"',
        '{"a": 1, "a": 2}',
        "  7 ",
        "-0.0",
        "0.1",
    ],
)
def test_loads_edge_cases_like_json(text: str) -> None:
    for raw in (text, text.encode()):
        got, want = fastjson.loads(raw), json.loads(raw)
        if isinstance(want, float) and math.isnan(want):
            assert math.isnan(got)
        else:
            assert got == want and type(got) is type(want)


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff", b"[1,]", b"{'a': 1}", '{"a": }'])
def test_loads_refuses_what_json_refuses(raw: bytes | str) -> None:
    with pytest.raises(ValueError):
        json.loads(raw)
    with pytest.raises(ValueError):
        fastjson.loads(raw)


@dataclasses.dataclass
class _Thing:
    x: int


@pytest.mark.parametrize("value", [datetime.now(UTC), {"at": datetime.now(UTC)}, _Thing(1), {1j}])
def test_dumps_refuses_what_json_refuses(value: Any) -> None:
    """Datetimes stay the caller's to write (as ISO-8601 strings), as with json."""
    with pytest.raises(TypeError):
        json.dumps(value)
    with pytest.raises(TypeError):
        fastjson.dumps(value)


def test_nan_and_infinities_are_written_as_null() -> None:
    """Never the `NaN` token json writes: it is not JSON."""
    assert fastjson.dumps([math.nan, math.inf, -math.inf, 1.5]) == b"[null,null,null,1.5]"


def test_non_ascii_text_is_utf8_not_escaped() -> None:
    assert fastjson.dumps({"title": "zażółć ✓"}) == '{"title":"zażółć ✓"}'.encode()


def test_envelope_bytes_round_trip_to_the_same_envelope() -> None:
    sent = make_envelope(
        "host.recovered", {"host": "gpu-ł1", "at": "2026-11-21T13:05:01+00:00"}, source="monitor"
    )
    body = sent.to_json()
    assert json.loads(body) == sent.to_dict()
    assert parse_envelope(body) == sent
