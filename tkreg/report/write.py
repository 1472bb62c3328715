"""Write a benchmark report: per op, a throughput plot against the measured ceiling and a speed-up
plot against the peer, and report.md with the full table; with a baseline, the changes too."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import markdown, plots
from .compare import DEFAULT_THRESHOLD_PCT, Comparison, compare
from .results import Result, Run, Source, load_run

REPORT_NAME = "report.md"
MAX_METHODS_LISTED = 5


@dataclass
class Report:
    """What write_report wrote and found."""

    directory: Path
    markdown: Path
    plots: list[Path] = field(default_factory=list)
    comparison: Comparison | None = None

    @property
    def regressed(self) -> bool:
        return self.comparison is not None and self.comparison.regressed


def file_stem(op: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", op)


def op_plots(results: list[Result], directory: Path, stem: str, suffix: str, draw: bool = True) -> list[Path]:
    """The throughput and speed-up plots of one op's results, as ``<stem>-throughput.png`` and
    ``<stem>-vs-peer.png`` in ``directory``; only those the results have data for. With
    draw=False, only the paths they would have."""
    op = results[0].op
    wanted = [
        ("throughput", plots.throughput_plot, "throughput vs ceiling", any(r.throughput is not None for r in results)),
        ("vs-peer", plots.speedup_plot, "speed-up over the peer", any(r.speedup is not None and not r.is_peer for r in results)),
    ]
    made = []
    for kind, plot, what, has_data in wanted:
        path = directory / f"{stem}-{kind}.png"
        if has_data:
            if draw:
                plot(results, path, f"{op}: {what}{suffix}")
            made.append(path)
    return made


def write_report(
    source: Source, out_dir: str | Path, *, baseline: Source | None = None, threshold_pct: float = DEFAULT_THRESHOLD_PCT
) -> Report:
    """Write report.md and the PNG plots into ``out_dir`` (created if missing).

    ``source`` and ``baseline``: a path to pytest-benchmark JSON (.json or .json.gz), the parsed
    document, or the list of ``extra_info`` rows a tkreg session collected. With a baseline, items
    are paired by op, kernel, config, case and dtype, and the report names every item whose device
    time grew by more than ``threshold_pct`` percent (``Report.regressed``).
    """
    run = load_run(source)
    if not run.results:
        raise ValueError(f"{run.meta['source']}: no benchmark results in it".replace("`", ""))
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    report = Report(directory, directory / REPORT_NAME)
    parts = ["# Benchmark report", "", *_header(run)]
    if baseline is not None:
        base = load_run(baseline)
        report.comparison = compare(base, run, threshold_pct)
        changes = plots.changes_plot(report.comparison, directory / "changes.png")
        report.plots += [changes] if changes else []
        parts += _changes_section(report.comparison, base, changes)
    for op in run.ops():
        results = run.of_op(op)
        made = op_plots(results, directory, file_stem(op), _title_suffix(run))
        report.plots += made
        parts += ["", f"## {op}", ""]
        parts += [f"![{op}: {p.stem}]({p.name})" for p in made]
        parts += ["", markdown.results_table(results)]
    report.markdown.write_text("\n".join(parts) + "\n")
    return report


def _title_suffix(run: Run) -> str:
    where = ", ".join(x for x in (run.meta.get("device", ""), run.meta.get("date", "")[:10]) if x)
    return f" ({where})" if where else ""


def _header(run: Run) -> list[str]:
    meta = run.meta
    lines = [f"- Results: {meta['source']}"]
    lines += [f"- {key.capitalize()}: {meta[key]}" for key in ("device", "date", "commit", "host") if meta.get(key)]
    ceilings = {(r.unit, r.ceiling_name): r.ceiling for r in run.results if r.ceiling}
    for (unit, name), value in ceilings.items():
        lines.append(f"- Ceiling measured in the same run: {value:.0f} {unit}" + (f", {name}" if name else ""))
    methods = Counter(r.timing for r in run.results if r.timing)
    if len(methods) == 1:
        lines.append(f"- Device time: {next(iter(methods))}")
    elif methods:  # e.g. most calls replayed from a CUDA graph, a few that could not be captured
        lines.append(f"- Device time, {len(methods)} methods (each item's `extra_info['timing']` says which):")
        lines += [f"  - {count} items: {method}" for method, count in methods.most_common(MAX_METHODS_LISTED)]
    lines.append(
        "- Columns: device time is the median per call; wall time (where recorded) includes the launcher; "
        "throughput comes from the op's cost model; vs peer is the peer's time over the kernel's; host is "
        "the launcher's Python work per call."
    )
    return lines


def _changes_section(comparison: Comparison, base: Run, plot: Path | None) -> list[str]:
    limit = comparison.threshold_pct
    lines = ["", "## Changes against the baseline", "", f"- Baseline: {base.meta['source']}"]
    lines += [f"- Baseline {key}: {base.meta[key]}" for key in ("device", "date", "commit") if base.meta.get(key)]
    slower, faster = comparison.slower, comparison.faster
    lines.append(
        f"- {len(comparison.changes)} items in both runs: {len(slower)} slower than {limit:g}%, {len(faster)} faster than "
        f"{limit:g}%; {len(comparison.added)} only in this run, {len(comparison.removed)} only in the baseline."
    )
    if slower:
        lines += ["", f"**Slower than {limit:g}% (device time):**", ""]
        lines += [f"- `{c.new.label}`: {c.pct:+.1f}% ({markdown.us(c.base.median_ms)} -> {markdown.us(c.new.median_ms)} us)"
                  for c in slower]
    if plot:
        lines += ["", f"![changes]({plot.name})"]
    lines += ["", markdown.change_table(comparison)]
    for title, items in (("Only in this run", comparison.added), ("Only in the baseline", comparison.removed)):
        if items:
            lines += ["", f"{title}: " + ", ".join(f"`{r.label}`" for r in items)]
    return lines
