"""PNG plots of benchmark results (matplotlib's Agg canvas: no display, no pyplot state).

matplotlib is imported inside each function, so importing tkreg.report stays cheap.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..core.dtypes import SHORT_NAMES
from .compare import Change, Comparison
from .results import Result, section_order, section_suffix, short_names

PEER_STYLE = {"color": "black", "marker": "D"}
MARKERS = "osv^<>phP*X"
MAX_ANNOTATED = 40  # label slowed-down items by name up to this many per op
# Speed-up ticks, coarsest first: the first set that puts MIN_TICKS ticks in the plotted range is
# used, so a narrow range (0.8x..1.3x) gets ticks such as 0.8x, 0.9x, 1x, 1.25x and a wide one
# (0.1x..20x) powers of two. The values are those a reader says aloud ("half", "1.5 times").
SPEEDUP_TICKS = (
    tuple(2.0**e for e in range(-10, 11)),
    (0.1, 0.2, 0.25, 0.33, 0.5, 0.67, 1, 1.5, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64),
    (0.5, 0.6, 0.7, 0.8, 0.9, 1, 1.1, 1.25, 1.5, 1.75, 2, 2.5, 3),
    (0.8, 0.85, 0.9, 0.95, 1, 1.05, 1.1, 1.15, 1.2, 1.25),
    (0.9, 0.92, 0.94, 0.96, 0.98, 1, 1.02, 1.04, 1.06, 1.08, 1.1),
)
MIN_TICKS = 4
SPEEDUP_MARGIN = 1.15  # the y range reaches this factor beyond the extreme speed-ups (log axis)


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
        plain = rows[0].is_peer and not rows[0].is_rival
        style = PEER_STYLE if plain else {"color": colours[n % len(colours)], "marker": MARKERS[n % len(MARKERS)]}
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
    """Speed-up over the op's peer per case and dtype (log scale, labelled ticks such as 0.5x,
    1x, 2x; 1 is the peer). None when no item has a peer figure."""
    fig = speedup_figure(results, title)
    return None if fig is None else _save(fig, path)


def speedup_figure(results: Sequence[Result], title: str = "") -> Any:
    """The figure speedup_plot saves; None when no item has a peer figure."""
    compared = [r for r in results if r.speedup is not None]  # kernels and rivals: the peer has none
    if not compared:
        return None
    fig = _figure(_width(len(_groups(compared)), len(_series(compared))), _height(len(_groups(compared))))
    ax = fig.subplots()
    _dot_plot(ax, compared, lambda r: r.speedup)
    ax.axhline(1.0, color="black", linewidth=1.0, label="peer (1x)")
    speedups = [r.speedup for r in compared if r.speedup]
    _speedup_axis(ax, min(speedups), max(speedups))
    ax.set_ylabel("speed-up over the peer (peer time / kernel time)")
    ax.set_title(title or f"{compared[0].op}: speed-up over the peer", fontsize=10)
    _legend(ax, len(_series(compared)))
    return fig


def speedup_ticks(low: float, high: float) -> list[float]:
    """Tick values for a speed-up axis from ``low`` to ``high``: the coarsest of SPEEDUP_TICKS
    with at least MIN_TICKS values in the range, else the finest."""
    for candidates in SPEEDUP_TICKS:
        inside = [float(t) for t in candidates if low <= t <= high]
        if len(inside) >= MIN_TICKS:
            return inside
    return [float(t) for t in SPEEDUP_TICKS[-1] if low <= t <= high] or [1.0]


def _speedup_axis(ax: Any, low: float, high: float) -> None:
    """A log axis through 1x with labelled ticks; the log keeps 2x and 0.5x equally far from 1x."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullLocator

    low, high = min(low, 1.0) / SPEEDUP_MARGIN, max(high, 1.0) * SPEEDUP_MARGIN
    ax.set_yscale("log")
    ax.set_ylim(low, high)
    ax.yaxis.set_major_locator(FixedLocator(speedup_ticks(low, high)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}x"))
    ax.yaxis.set_minor_locator(NullLocator())  # unlabelled log minor ticks only add clutter


LABEL_FONT_PT = 6  # names of slower items under the bars
LABEL_INCH_PER_CHAR = LABEL_FONT_PT * 0.6 / 72  # a character's advance at that size, roughly
PEER_COLOUR = "tab:blue"  # a peer's bar: the machine's drift, judged by no gate
RIVAL_COLOUR = "tab:purple"  # a rival's bar (torch.compile, another library): judged by no gate


def changes_plot(comparison: Comparison, path: str | Path) -> Path | None:
    """Per op (and mode, parameters), every compared item's change, sorted: kernels by the change
    the gate judges (relative to the peer by default), slower than the threshold in red and named
    under their bars, faster in green; then the peers' own changes (drift) in blue. None when
    nothing was compared."""
    fig = changes_figure(comparison)
    return None if fig is None else _save(fig, path)


def changes_figure(comparison: Comparison) -> Any:
    """The figure changes_plot saves; None when nothing was compared."""
    by_section: dict[tuple[str, str, str], list[Change]] = {}
    for c in comparison.changes:
        by_section.setdefault(c.new.section, []).append(c)
    if not by_section:
        return None
    limit, gate = comparison.threshold_pct, comparison.gate
    widest = max(len(v) for v in by_section.values())
    sections = sorted(by_section.items(), key=lambda kv: section_order(kv[0]))
    # Names stand under the bars, as tick labels, so the layout makes room for them below each
    # axes instead of letting them run up into the title.
    named = [[c for c in changes if c.kind == "kernel" and _gated(c, gate) > limit][:MAX_ANNOTATED] for _, changes in sections]
    label_room = [max((len(_short_label(c)) for c in n), default=0) * LABEL_INCH_PER_CHAR for n in named]
    heights = [2.8 + room for room in label_room]
    fig = _figure(min(40.0, max(8.0, 0.12 * widest + 3.0)), sum(heights))
    axes = fig.subplots(len(sections), 1, squeeze=False, height_ratios=heights)[:, 0]
    for ax, ((op, mode, params), changes) in zip(axes, sections):
        values = [_gated(c, gate) for c in changes]
        colours = [_colour(c, v, limit) for c, v in zip(changes, values)]
        ax.bar(range(len(values)), values, color=colours, width=0.8)
        for bound in (limit, -limit):
            ax.axhline(bound, color="0.4", linestyle="--", linewidth=0.8)
        ax.axhline(0.0, color="black", linewidth=0.8)
        slower = [i for i, (c, v) in enumerate(zip(changes, values)) if c.kind == "kernel" and v > limit]
        shown = slower[:MAX_ANNOTATED]
        ax.set_xticks(shown, [_short_label(changes[i]) for i in shown], rotation=90, fontsize=LABEL_FONT_PT)
        ax.set_xlim(-1, len(values))
        ax.set_ylabel("vs peer (%)" if gate == "relative" else "device time (%)")
        kernels = sum(c.kind == "kernel" for c in changes)
        title = f"{op} {section_suffix(mode, params)}".strip()
        others = [f"{n} {kind}s ({colour})" for kind, colour in (("peer", "blue: drift"), ("rival", "purple"))
                  if (n := sum(c.kind == kind for c in changes))]  # fmt: skip
        ax.set_title(f"{title}: {kernels} kernel items, {len(slower)} slower than {limit:g}% ({gate})"
                     + "".join(f"; {o}" for o in others), fontsize=9)  # fmt: skip
        low, high = min([*values, -limit]), max([*values, limit])
        ax.set_ylim(low * 1.15 - 1, high * 1.15 + 1)
    return fig


def _gated(change: Change, gate: str) -> float:
    """The bar of a change: what the gate judges for a kernel, the same measure for a rival, a
    peer's own change (drift)."""
    if change.kind == "rival" and gate == "relative" and change.relative_pct is not None:
        return change.relative_pct
    gated = change.gated_pct(gate)
    return change.pct if gated is None else gated


def _colour(change: Change, value: float, limit: float) -> str:
    if change.kind != "kernel":
        return PEER_COLOUR if change.is_drift else RIVAL_COLOUR
    return "tab:red" if value > limit else "tab:green" if value < -limit else "0.6"


def _short_label(change: Change) -> str:
    return change.new.label.removeprefix(f"{change.new.op}/")


def _save(fig: Any, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return path
