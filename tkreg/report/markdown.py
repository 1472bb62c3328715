"""Markdown tables of benchmark results and of their changes against a baseline."""

from __future__ import annotations

from collections.abc import Sequence

from .compare import Comparison
from .results import Result


def table(headers: Sequence[str], rows: Sequence[Sequence[str]], numeric: Sequence[bool] | None = None) -> str:
    """A Markdown table; columns flagged numeric are right-aligned."""
    numeric = numeric or [False] * len(headers)
    lines = [
        "| " + " | ".join(headers) + " |",
        "| " + " | ".join("---:" if n else "---" for n in numeric) + " |",
    ]
    lines += ["| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def us(ms: float | None) -> str:
    """Milliseconds shown as microseconds."""
    return "-" if ms is None else f"{ms * 1e3:.1f}"


def rate(r: Result) -> str:
    return "-" if r.throughput is None else f"{r.throughput:.0f} {r.unit}"


def percent(fraction: float | None) -> str:
    return "-" if fraction is None else f"{fraction * 100:.0f}%"


def versus_peer(r: Result) -> str:
    if r.is_peer:
        return "(peer)"
    return "-" if r.speedup is None else f"{r.speedup:.2f}x"


def results_table(results: Sequence[Result]) -> str:
    """One row per item: device time, wall time where recorded, throughput, fraction of the
    ceiling, speed-up over the peer and the launcher's host time."""
    with_wall = any(r.wall_ms is not None for r in results)
    headers = ["kernel", "config", "case", "dtype", "device time (us)"]
    headers += ["wall time (us)"] if with_wall else []
    headers += ["throughput", "of ceiling", "vs peer", "host (us/call)"]
    rows = []
    for r in results:
        row = [r.kernel, r.config_id or "-", r.case, r.short_dtype, us(r.median_ms)]
        row += [us(r.wall_ms)] if with_wall else []
        row += [rate(r), percent(r.fraction), versus_peer(r), "-" if r.host_us is None else f"{r.host_us:.0f}"]
        rows.append(row)
    numeric = [False] * 4 + [True] * (len(headers) - 4)
    return table(headers, rows, numeric)


def change_table(comparison: Comparison) -> str:
    """Every item in both runs, the largest slow-down first."""
    rows = []
    limit = comparison.threshold_pct
    for c in comparison.changes:
        verdict = "slower" if c.pct > limit else "faster" if c.pct < -limit else ""
        wall = "-" if c.wall_pct is None else f"{c.wall_pct:+.1f}%"
        rows.append([c.new.label, us(c.base.median_ms), us(c.new.median_ms), f"{c.pct:+.1f}%", wall, verdict])
    headers = ["item", "baseline (us)", "this run (us)", "device time", "wall time", f"beyond {comparison.threshold_pct:g}%"]
    return table(headers, rows, [False, True, True, True, True, False])
