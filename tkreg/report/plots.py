"""PNG plots of benchmark results (matplotlib's Agg canvas: no display, no pyplot state).

matplotlib is imported inside each function, so importing tkreg.report stays cheap.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.dtypes import SHORT_NAMES
from .compare import Comparison
from .results import Result, short_names

PEER_STYLE = {"color": "black", "marker": "D"}
MARKERS = "osv^<>phP*X"
MAX_ANNOTATED = 40  # label slowed-down items by name up to this many per op


def _figure(width: float, height: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=100, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _groups(results: Sequence[Result]) -> list[tuple[str, str]]:
    """(case, dtype) in the order the run measured them."""
    return list(dict.fromkeys((r.case, r.dtype) for r in results))


def _series(results: Sequence[Result]) -> dict[tuple[str, str], list[Result]]:
    """Results per (kernel, config), the peer first."""
    series: dict[tuple[str, str], list[Result]] = {}
    for r in sorted(results, key=lambda r: not r.is_peer):
        series.setdefault((r.kernel, r.config_id), []).append(r)
    return series


CROWDED_COLUMNS = 16  # more (case, dtype) columns than this get vertical labels


def _dot_plot(ax: Any, results: Sequence[Result], value: Any) -> None:
    """One column per (case, dtype); each kernel/config a marker, side by side within a column."""
    from matplotlib import colormaps

    groups = _groups(results)
    column = {g: i for i, g in enumerate(groups)}
    series = _series(results)
    names = short_names(results)
    colours = colormaps["tab20"].colors if len(series) > 10 else colormaps["tab10"].colors
    width = 0.8
    for n, ((kernel, config), rows) in enumerate(series.items()):
        offset = -width / 2 + width * (n + 0.5) / len(series)
        points = [(column[(r.case, r.dtype)] + offset, value(r)) for r in rows if value(r) is not None]
        if not points:
            continue
        style = PEER_STYLE if rows[0].is_peer else {"color": colours[n % len(colours)], "marker": MARKERS[n % len(MARKERS)]}
        xs, ys = zip(*points)
        ax.plot(xs, ys, linestyle="none", markersize=6, label=names[(kernel, config)], **style)
    crowded = len(groups) > CROWDED_COLUMNS  # labels side by side would overlap: stand them up
    labels = [f"{case} {SHORT_NAMES.get(dtype, dtype)}" if crowded else f"{case}\n{SHORT_NAMES.get(dtype, dtype)}"
              for case, dtype in groups]  # fmt: skip
    ax.set_xticks(range(len(groups)), labels, fontsize=7 if crowded else 8, rotation=90 if crowded else 0)
    for i in range(1, len(groups)):
        ax.axvline(i - 0.5, color="0.9", linewidth=0.8, zorder=0)
    ax.grid(axis="y", color="0.9")
    ax.set_xlim(-0.5, len(groups) - 0.5)


def _legend(ax: Any, count: int) -> None:
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=7, frameon=False, ncols=1 if count <= 24 else 2)


def _height(groups: int) -> float:
    """Inches: vertical case labels need more room below the axes."""
    return 7.0 if groups > CROWDED_COLUMNS else 5.5


def _width(groups: int, series: int) -> float:
    """Inches: room for every marker, within what a page shows."""
    return min(20.0, max(8.0, 1.0 * groups + 3.0, 0.1 * groups * max(series, 4) + 6.0))


def throughput_plot(results: Sequence[Result], path: str | Path, title: str = "") -> Path | None:
    """Achieved GB/s or TFLOP/s per kernel and case, against the ceiling measured in the same run
    (a dashed line). None when the results carry no throughput."""
    rated = [r for r in results if r.throughput is not None]
    if not rated:
        return None
    unit = rated[0].unit
    fig = _figure(_width(len(_groups(rated)), len(_series(rated))), _height(len(_groups(rated))))
    ax = fig.subplots()
    _dot_plot(ax, rated, lambda r: r.throughput)
    ceilings = [r.ceiling for r in rated if r.ceiling]
    top = max(r.throughput or 0.0 for r in rated)
    if ceilings:
        ceiling = statistics.median(ceilings)
        what = next((r.ceiling_name for r in rated if r.ceiling_name), "ceiling")
        label = f"ceiling, this run: {ceiling:.0f} {unit} ({what})"
        ax.axhline(ceiling, color="tab:red", linestyle="--", linewidth=1.2, label=label)
        top = max(top, ceiling)
    ax.set_ylim(0, top * 1.12)
    ax.set_ylabel(f"achieved {unit} (median)")
    ax.set_title(title or f"{rated[0].op}: throughput against the measured ceiling", fontsize=10)
    _legend(ax, len(_series(rated)))
    return _save(fig, path)


def speedup_plot(results: Sequence[Result], path: str | Path, title: str = "") -> Path | None:
    """Speed-up over the op's peer per case and dtype (log scale; 1 is the peer). None when no
    item has a peer figure."""
    compared = [r for r in results if r.speedup is not None and not r.is_peer]
    if not compared:
        return None
    fig = _figure(_width(len(_groups(compared)), len(_series(compared))), _height(len(_groups(compared))))
    ax = fig.subplots()
    _dot_plot(ax, compared, lambda r: r.speedup)
    ax.axhline(1.0, color="black", linewidth=1.0, label="peer (1x)")
    ax.set_yscale("log", base=2)
    ax.yaxis.set_major_formatter(_times_formatter())
    ax.set_ylabel("speed-up over the peer (peer time / kernel time)")
    ax.set_title(title or f"{compared[0].op}: speed-up over the peer", fontsize=10)
    _legend(ax, len(_series(compared)))
    return _save(fig, path)


def _times_formatter() -> Any:
    from matplotlib.ticker import FuncFormatter

    return FuncFormatter(lambda v, _pos: f"{v:g}x")


def changes_plot(comparison: Comparison, path: str | Path) -> Path | None:
    """Per op, every compared item's change in device time, sorted; items slower than the
    threshold in red and named, faster ones in green. None when nothing was compared."""
    by_op: dict[str, list[Any]] = {}
    for c in comparison.changes:
        by_op.setdefault(c.new.op, []).append(c)
    if not by_op:
        return None
    limit = comparison.threshold_pct
    widest = max(len(v) for v in by_op.values())
    fig = _figure(min(40.0, max(8.0, 0.12 * widest + 3.0)), 3.2 * len(by_op))
    axes = fig.subplots(len(by_op), 1, squeeze=False)[:, 0]
    for ax, (op, changes) in zip(axes, sorted(by_op.items())):
        pcts = [c.pct for c in changes]
        colours = ["tab:red" if p > limit else "tab:green" if p < -limit else "0.6" for p in pcts]
        ax.bar(range(len(pcts)), pcts, color=colours, width=0.8)
        for bound in (limit, -limit):
            ax.axhline(bound, color="0.4", linestyle="--", linewidth=0.8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        slower = [(i, c) for i, c in enumerate(changes) if c.pct > limit]
        for i, c in slower[:MAX_ANNOTATED]:
            ax.annotate(c.new.label.removeprefix(f"{op}/"), (i, c.pct), xytext=(2, 2), textcoords="offset points",
                        rotation=90, fontsize=6, ha="center", va="bottom")
        ax.set_xticks([])
        ax.set_xlim(-1, len(pcts))
        ax.set_ylabel("device time change (%)")
        ax.set_title(f"{op}: {len(changes)} items, {len(slower)} slower than {limit:g}%", fontsize=9)
        low, high = min([*pcts, -limit]), max([*pcts, limit])
        ax.set_ylim(low * 1.15 - 1, high * (2.4 if slower else 1.3) + 1)  # room for the names above the bars
    return _save(fig, path)


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
