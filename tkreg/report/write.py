"""Write a benchmark report: per op (and per mode and parameter values where a run has several), a
throughput plot against the measured ceiling and a speed-up plot against the peer, and report.md
with the full table; with a baseline, the changes too, kernels' apart from the machine's drift."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from . import markdown, plots
from .compare import DEFAULT_GATE, DEFAULT_THRESHOLD_PCT, Change, Comparison, compare
from .results import Result, ResultsError, Run, Source, load_run, section_suffix

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


def section_stem(section: tuple[str, str, str]) -> str:
    """File names of a section's plots: ``matmul``, ``matmul-bwd``, ``rms_norm-fwd-eps_1e-06``."""
    op, mode, params = section
    return file_stem("-".join(x for x in (op, section_suffix(mode, params).replace(" ", "-")) if x))


def section_title(section: tuple[str, str, str]) -> str:
    op, mode, params = section
    return f"{op} {section_suffix(mode, params)}".strip()


def op_plots(results: list[Result], directory: Path, stem: str, suffix: str, draw: bool = True) -> list[Path]:
    """The throughput and speed-up plots of one op's results (one section: a mode and parameter
    values), as ``<stem>-throughput.png`` and ``<stem>-vs-peer.png`` in ``directory``; only those
    the results have data for. With draw=False, only the paths they would have."""
    op = section_title(results[0].section)
    wanted = [
        ("throughput", plots.throughput_plot, "throughput vs ceiling", any(r.throughput is not None for r in results)),
        ("vs-peer", plots.speedup_plot, "speed-up over the peer", any(r.speedup is not None for r in results)),
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
    source: Source,
    out_dir: str | Path,
    *,
    baseline: Source | None = None,
    threshold_pct: float = DEFAULT_THRESHOLD_PCT,
    gate: str = DEFAULT_GATE,
) -> Report:
    """Write report.md and the PNG plots into ``out_dir`` (created if missing).

    ``source`` and ``baseline``: a path to pytest-benchmark JSON (.json or .json.gz), the parsed
    document, or the list of ``extra_info`` rows a tkreg session collected. With a baseline, items
    are paired by op, kernel, config, case, dtype, mode and parameters, and the report names every
    kernel whose device time grew by more than ``threshold_pct`` percent (``Report.regressed``):
    relative to its peer on the same case where both runs timed the peer (``gate="relative"``, the
    default), or on its own (``gate="absolute"``). The peers' own changes are the machine's drift.
    Both inputs are read before anything is written; an unreadable one raises ResultsError (a
    ValueError) naming it.
    """
    run = load_run(source)
    if not run.results:
        raise ResultsError(f"{run.meta['source']}: no benchmark results in it".replace("`", ""))
    base = load_run(baseline) if baseline is not None else None
    comparison = compare(base, run, threshold_pct, gate) if base is not None else None
    directory = Path(out_dir)
    directory.mkdir(parents=True, exist_ok=True)
    report = Report(directory, directory / REPORT_NAME, comparison=comparison)
    parts = ["# Benchmark report", "", *_header(run)]
    if base is not None and comparison is not None:
        changes = plots.changes_plot(comparison, directory / "changes.png")
        report.plots += [changes] if changes else []
        parts += _changes_section(comparison, base, changes)
    for section in run.sections():
        results = run.of_section(section)
        made = op_plots(results, directory, section_stem(section), _title_suffix(run))
        report.plots += made
        title = section_title(section)
        parts += ["", f"## {title}", ""]
        parts += [f"![{title}: {p.stem}]({p.name})" for p in made]
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


GATE_TEXT = {
    "relative": "each kernel's device time relative to its peer's on the same case (the ratio in this run against "
    "the ratio in the baseline), so that what moved every item alike (the machine) does not count",
    "absolute": "each kernel's own device time",
}


def _changes_section(comparison: Comparison, base: Run, plot: Path | None) -> list[str]:
    limit, gate = comparison.threshold_pct, comparison.gate
    lines = ["", "## Changes against the baseline", "", f"- Baseline: {base.meta['source']}"]
    lines += [f"- Baseline {key}: {base.meta[key]}" for key in ("device", "date", "commit") if base.meta.get(key)]
    slower, faster = comparison.slower, comparison.faster
    lines.append(f"- Gate ({gate}): {GATE_TEXT[gate]}.")
    if gate == "relative" and comparison.judged_absolute:
        alone = len(comparison.judged_absolute)
        lines.append(f"- {alone} kernel items have no peer timed in both runs: judged on their own change.")
    lines.append(
        f"- {len(comparison.kernels)} kernel items in both runs: {len(slower)} slower than {limit:g}%, {len(faster)} faster "
        f"than {limit:g}%; {len(comparison.added)} items only in this run, {len(comparison.removed)} only in the baseline."
    )
    drift = comparison.median_drift_pct
    if drift is not None:
        lines.append(
            f"- Machine drift: the peers, timed beside the kernels, moved by {drift:+.1f}% (median of "
            f"{len(comparison.drift)}); their changes are drift, not regressions."
        )
    if slower:
        lines += ["", f"**Slower than {limit:g}% ({gate} gate):**", ""]
        lines += [f"- `{c.new.label}`: {describe_change(c, gate)}" for c in slower]
    if plot:
        lines += ["", f"![changes]({plot.name})"]
    lines += ["", change_table(comparison)]
    for title, items in (("Only in this run", comparison.added), ("Only in the baseline", comparison.removed)):
        if items:
            lines += ["", f"{title}: " + ", ".join(f"`{r.label}`" for r in items)]
    return lines


def describe_change(change: Change, gate: str) -> str:
    """``+25.0% vs peer (device time 9.8 -> 12.3 us, +25.0%; peer +0.0%)``."""
    times = f"device time {markdown.us(change.base.median_ms)} -> {markdown.us(change.new.median_ms)} us, {change.pct:+.1f}%"
    if change.is_drift:
        return f"{change.pct:+.1f}% drift ({times})"
    peer = "" if change.peer_pct is None else f"; peer {change.peer_pct:+.1f}%"
    if change.kind == "rival":
        return f"{change.pct:+.1f}% rival ({times}{peer})"
    gated = change.gated_pct(gate) or 0.0
    return f"{gated:+.1f}% {change.basis(gate)} ({times}{peer})"


def verdict(change: Change, comparison: Comparison) -> str:
    """What the gate made of a change: slower, faster, drift (a peer beyond the threshold) or ""."""
    limit = comparison.threshold_pct
    if change.kind != "kernel":  # the machine's drift, or a rival's change: never a verdict on a kernel
        return "drift" if change.is_drift and abs(change.pct) > limit else ""
    gated = change.gated_pct(comparison.gate) or 0.0
    return "slower" if gated > limit else "faster" if gated < -limit else ""


def change_table(comparison: Comparison) -> str:
    """Every item in both runs, kernels first (the largest gated change first), then the peers;
    device time before and after, its change, the peer's change and the change relative to it."""
    rows = []
    for c in comparison.changes:
        wall = "-" if c.wall_pct is None else f"{c.wall_pct:+.1f}%"
        peer = "(peer)" if c.is_drift else "-" if c.peer_pct is None else f"{c.peer_pct:+.1f}%"
        peer += " (rival)" if c.kind == "rival" else ""
        relative = "-" if c.relative_pct is None else f"{c.relative_pct:+.1f}%"
        row = [c.new.label, markdown.us(c.base.median_ms), markdown.us(c.new.median_ms), f"{c.pct:+.1f}%", peer, relative]
        rows.append([*row, wall, verdict(c, comparison)])
    headers = ["item", "baseline (us)", "this run (us)", "device time", "peer", "vs peer", "wall time",
               f"beyond {comparison.threshold_pct:g}% ({comparison.gate})"]  # fmt: skip
    return markdown.table(headers, rows, [False] + [True] * 6 + [False])
