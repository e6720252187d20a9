"""Percentiles and min/median/max over repetitions."""
from __future__ import annotations

import math
import statistics


def percentile(sorted_values: list[float], q: float) -> float:
    """Nearest-rank percentile of an ascending list (q in 0..100)."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def spread(values: list[float]) -> tuple[float, float, float] | None:
    """(min, median, max) of the finite values, or None when there are none."""
    xs = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not xs:
        return None
    return min(xs), statistics.median(xs), max(xs)
