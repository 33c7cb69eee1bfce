"""The compiled fast-path validators never accept what the marshmallow schemas refuse."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from marshmallow import ValidationError

from services.shared.contracts import EVENT_TYPES, EventType, _known_fields_only

ISO_TIMES = st.sampled_from(
    [
        "2026-11-21T13:05:01+00:00",
        "2026-11-21T13:05:01.123456+01:00",
        "2026-11-21T13:05:01Z",
        "2026-11-21T13:05:01",  # naive: refused
        "2026-11-21",
        "yesterday",
        "",
    ]
)
SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=10**6),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=5),
    ISO_TIMES,
)


def values_for(etype: EventType) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with the schema's keys (some missing, some extra) and arbitrary JSON values."""
    names = sorted(etype.schema().fields)
    nested = st.dictionaries(st.sampled_from([*names, "uuid", "pid", "gpu_uuid", "x"]), SCALARS)
    value = st.one_of(SCALARS, st.lists(st.one_of(SCALARS, nested), max_size=3), nested)
    return st.dictionaries(st.sampled_from([*names, "extra"]), value)


@pytest.mark.parametrize("etype", EVENT_TYPES, ids=lambda t: f"{t.name}-v{t.version}")
@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_fast_path_never_accepts_what_marshmallow_refuses(etype: EventType, data: Any) -> None:
    sample = data.draw(values_for(etype))
    schema = etype.schema()
    if etype._fast_strict is not None and etype._fast_strict(sample):
        schema.load(sample)  # must not raise
    if etype._fast_lenient is not None and etype._fast_lenient(sample):
        schema.load(_known_fields_only(schema, sample))


VALID = {
    "host.sampled": {
        "host": "h1",
        "sampled_at": "2026-11-21T13:05:01+00:00",
        "cpu_percent": 12.5,
        "load_1m": None,
        "gpus": [{"uuid": "GPU-1", "index": 0, "utilization_gpu_percent": None, "new": 1}],
    },
    "processes.observed": {
        "host": "h1",
        "observed_at": "2026-11-21T13:05:01+00:00",
        "processes": [
            {"gpu_uuid": "GPU-1", "pid": 42, "user": "bob", "command": "python train.py"}
        ],
    },
    "host.recovered": {"host": "h1", "at": "2026-11-21T13:05:01Z"},
}


@pytest.mark.parametrize("etype", EVENT_TYPES, ids=lambda t: f"{t.name}-v{t.version}")
def test_every_declared_type_has_a_fast_path(etype: EventType) -> None:
    assert etype._fast_strict is not None
    assert etype._fast_lenient is not None


@pytest.mark.parametrize("name", sorted(VALID))
def test_valid_data_takes_the_fast_path(name: str) -> None:
    etype = next(t for t in EVENT_TYPES if t.name == name)
    sample = VALID[name]
    assert etype._fast_lenient is not None and etype._fast_lenient(sample)
    strict_ok = etype._fast_strict is not None and etype._fast_strict(sample)
    try:
        etype.schema().load(sample)
        marshmallow_ok = True
    except ValidationError:
        marshmallow_ok = False
    assert strict_ok == marshmallow_ok  # the unknown nested "new" key: refused by both
    assert etype.errors(sample, strict=False) == {}
