"""Usage statistics of one reservation, added up from monitor samples (pure).

Totals, not averages, are what is stored, so samples can keep arriving and an average is
always a sum over a count. A figure the monitor did not report is None and counts nowhere:
not available is not zero.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any


@dataclass(frozen=True)
class UsageTotals:
    gpu_samples: int = 0  # GPU-samples with a utilisation figure
    util_sum: float = 0.0
    util_peak: float | None = None
    mem_samples: int = 0  # GPU-samples with a memory figure
    mem_sum_mib: float = 0.0
    mem_peak_mib: float | None = None
    idle_samples: int = 0  # GPU-samples with utilisation under the idle threshold
    first_sample_at: datetime | None = None
    last_sample_at: datetime | None = None


def add_samples(
    totals: UsageTotals,
    at: datetime,
    figures: Iterable[tuple[float | None, float | None]],
    idle_below_percent: float,
) -> UsageTotals:
    """`totals` plus one host sample: (utilization_gpu_percent, memory_used_mib) per GPU.

    A sample with no GPU figures at all changes nothing; one whose figures are all None
    still moves first/last_sample_at (the host answered, the GPUs did not report).
    """
    rows = list(figures)
    if not rows:
        return totals
    utils = [util for util, _ in rows if util is not None]
    mems = [mem for _, mem in rows if mem is not None]
    return replace(
        totals,
        gpu_samples=totals.gpu_samples + len(utils),
        util_sum=totals.util_sum + sum(utils),
        util_peak=_peak(totals.util_peak, utils),
        mem_samples=totals.mem_samples + len(mems),
        mem_sum_mib=totals.mem_sum_mib + sum(mems),
        mem_peak_mib=_peak(totals.mem_peak_mib, mems),
        idle_samples=totals.idle_samples + sum(1 for util in utils if util < idle_below_percent),
        first_sample_at=at if totals.first_sample_at is None else min(totals.first_sample_at, at),
        last_sample_at=at if totals.last_sample_at is None else max(totals.last_sample_at, at),
    )


def _peak(current: float | None, values: list[float]) -> float | None:
    candidates = values if current is None else [current, *values]
    return max(candidates) if candidates else None


def summary(totals: UsageTotals) -> dict[str, Any]:
    """What the UI shows; None wherever there is no data (rather than a misleading 0)."""
    util_n, mem_n = totals.gpu_samples, totals.mem_samples
    return {
        "samples": util_n,
        "avg_utilization_percent": round(totals.util_sum / util_n, 2) if util_n else None,
        "peak_utilization_percent": totals.util_peak,
        "avg_memory_used_mib": round(totals.mem_sum_mib / mem_n, 2) if mem_n else None,
        "peak_memory_used_mib": totals.mem_peak_mib,
        "idle_share": round(totals.idle_samples / util_n, 4) if util_n else None,
        "first_sample_at": _iso(totals.first_sample_at),
        "last_sample_at": _iso(totals.last_sample_at),
    }


def to_row(totals: UsageTotals) -> dict[str, Any]:
    """Plain JSON values for storing (datetimes as ISO strings)."""
    row = asdict(totals)
    row["first_sample_at"] = _iso(totals.first_sample_at)
    row["last_sample_at"] = _iso(totals.last_sample_at)
    return row


def from_row(row: Mapping[str, Any]) -> UsageTotals:
    """The inverse of to_row; missing keys take their defaults, unknown ones are ignored."""
    defaults = UsageTotals()

    def number(key: str, default: float) -> float:
        value = row.get(key)
        return default if value is None else float(value)

    def optional(key: str) -> float | None:
        value = row.get(key)
        return None if value is None else float(value)

    return UsageTotals(
        gpu_samples=int(row.get("gpu_samples") or defaults.gpu_samples),
        util_sum=number("util_sum", defaults.util_sum),
        util_peak=optional("util_peak"),
        mem_samples=int(row.get("mem_samples") or defaults.mem_samples),
        mem_sum_mib=number("mem_sum_mib", defaults.mem_sum_mib),
        mem_peak_mib=optional("mem_peak_mib"),
        idle_samples=int(row.get("idle_samples") or defaults.idle_samples),
        first_sample_at=_parse(row.get("first_sample_at")),
        last_sample_at=_parse(row.get("last_sample_at")),
    )


def _iso(moment: datetime | None) -> str | None:
    return None if moment is None else moment.isoformat()


def _parse(text: str | None) -> datetime | None:
    return None if text is None else datetime.fromisoformat(text)
