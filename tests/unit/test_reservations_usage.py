"""Usage totals of a reservation: not-reported figures count nowhere, rows round-trip."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

from hypothesis import given, settings
from hypothesis import strategies as st

from services.reservations.usage.totals import UsageTotals, add_samples, from_row, summary, to_row

T0 = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)
S = timedelta(seconds=10)


def test_empty_totals_summarise_to_no_data() -> None:
    assert summary(UsageTotals()) == {
        "samples": 0,
        "avg_utilization_percent": None,
        "peak_utilization_percent": None,
        "avg_memory_used_mib": None,
        "peak_memory_used_mib": None,
        "idle_share": None,
        "first_sample_at": None,
        "last_sample_at": None,
    }


def test_samples_add_up_and_none_is_not_zero() -> None:
    totals = add_samples(UsageTotals(), T0, [(90.0, 1000.0), (None, 3000.0)], 5.0)
    totals = add_samples(totals, T0 + S, [(2.0, None), (None, None)], 5.0)
    totals = add_samples(totals, T0 + 2 * S, [(40.0, 2000.0), (0.0, 500.0)], 5.0)
    assert totals.gpu_samples == 4 and totals.mem_samples == 4
    assert summary(totals) == {
        "samples": 4,
        "avg_utilization_percent": 33.0,
        "peak_utilization_percent": 90.0,
        "avg_memory_used_mib": 1625.0,
        "peak_memory_used_mib": 3000.0,
        "idle_share": 0.5,  # 2 % and 0 % are under 5 %
        "first_sample_at": T0.isoformat(),
        "last_sample_at": (T0 + 2 * S).isoformat(),
    }


def test_a_sample_without_figures_changes_nothing_and_order_does_not_matter() -> None:
    assert add_samples(UsageTotals(), T0, [], 5.0) == UsageTotals()
    only_none = add_samples(UsageTotals(), T0, [(None, None)], 5.0)
    assert only_none.gpu_samples == 0 and only_none.first_sample_at == T0
    later = add_samples(UsageTotals(), T0 + S, [(1.0, 1.0)], 5.0)
    late_first = add_samples(later, T0, [(1.0, 1.0)], 5.0)
    assert (late_first.first_sample_at, late_first.last_sample_at) == (T0, T0 + S)


def test_idle_is_strictly_below_the_threshold() -> None:
    totals = add_samples(UsageTotals(), T0, [(5.0, None), (4.99, None)], 5.0)
    assert totals.idle_samples == 1


def test_rows_are_plain_json_and_round_trip() -> None:
    totals = add_samples(UsageTotals(), T0, [(12.5, 100.0)], 5.0)
    row = to_row(totals)
    assert json.loads(json.dumps(row)) == row
    assert row["first_sample_at"] == T0.isoformat()
    assert from_row(row) == totals
    assert from_row(to_row(UsageTotals())) == UsageTotals()
    assert from_row({}) == UsageTotals()  # rows from before a field existed


figures_st = st.lists(
    st.tuples(
        st.none() | st.floats(0, 100, allow_nan=False),
        st.none() | st.floats(0, 81920, allow_nan=False),
    ),
    max_size=8,
)


@settings(max_examples=100, deadline=None)
@given(st.lists(figures_st, max_size=6), st.floats(0, 100, allow_nan=False))
def test_totals_agree_with_the_flat_list_of_figures(
    samples: list[list[tuple[float | None, float | None]]], idle_below: float
) -> None:
    totals = UsageTotals()
    for number, figures in enumerate(samples):
        totals = add_samples(totals, T0 + number * S, figures, idle_below)
    flat = [f for figures in samples for f in figures]
    utils = [u for u, _ in flat if u is not None]
    mems = [m for _, m in flat if m is not None]
    assert totals.gpu_samples == len(utils)
    assert totals.mem_samples == len(mems)
    assert totals.util_peak == (max(utils) if utils else None)
    assert totals.mem_peak_mib == (max(mems) if mems else None)
    assert totals.idle_samples == sum(1 for u in utils if u < idle_below)
    result = summary(totals)
    if utils:
        assert 0 <= result["idle_share"] <= 1
        assert min(utils) - 0.01 <= result["avg_utilization_percent"] <= max(utils) + 0.01
    assert from_row(json.loads(json.dumps(to_row(totals)))) == totals
