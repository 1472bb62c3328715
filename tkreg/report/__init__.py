"""Benchmark reports from stored results: plots, a Markdown table, and a comparison with a
baseline run (``tkreg report``). Plotting imports matplotlib only when a report is written."""

from __future__ import annotations

from .compare import DEFAULT_THRESHOLD_PCT, Change, Comparison, compare
from .results import Result, Run, load_run
from .write import Report, write_report

__all__ = [
    "DEFAULT_THRESHOLD_PCT",
    "Change",
    "Comparison",
    "Report",
    "Result",
    "Run",
    "compare",
    "load_run",
    "write_report",
]
