"""Small figure helpers the benchmark suites and the record's tables share: a geometric mean, and numbers as cells."""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from typing import Any


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of the positive values (NaN where there are none)."""
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def ratio_range(sorted_ratios: Sequence[float]) -> str:
    """"1.1x to 3.4x"; "1.1x to 10897x" (tenths from 10x up say nothing)."""
    return " to ".join(f"{x:.1f}x" if x < 10 else f"{x:.0f}x" for x in (sorted_ratios[0], sorted_ratios[-1]))


def median_of_sorted(sorted_values: Sequence[float]) -> float:
    return sorted_values[len(sorted_values) // 2]


def us_text(value: Any) -> str:
    return f"{value:.1f}" if is_number(value) else "-"
