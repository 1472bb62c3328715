"""What a call costs the user: measured wall time per call, and the model between measured points.

This is the prior: what tkreg.ops ranks by where it does not time a call itself (tuning off, a
CUDA-graph capture, a compile trace; see :mod:`.tuning`). The data belongs to the op's plugin: a
folder the op names in ``Op(measured="package:folder")``, one file per GPU
(``<device name, lower case, dashes>.json``, written by ``tkreg bench ranking``; a
tkreg.report.records envelope of kind "ops_ranking"). It holds, per kernel or peer ("peer"),
dtype, input dims and layout, three figures measured on one device:

- ``wall_us``: ``triton.testing.do_bench`` median, launcher included: the time from one call's
  start on the GPU to its last kernel's end, including any time the GPU waits for the launcher;
- ``device_us``: the kernels alone (L2 flushed, the GPU held so the launch is queued in time);
- ``host_us``: the launcher's Python time per call.

The model, for inputs of some dims: take the measured points of this candidate and dtype (fp16
and bf16 stand in for each other) in the inputs' shape class and layout (else the nearest
available: same layout, same class, any), order them by work (the op's cost model: bytes moved
for memory-bound ops, FLOPs for compute-bound ones) and interpolate wall and device time
linearly in log(work) vs log(time); below the smallest point take its times (small inputs are
latency- and launch-bound), above the largest scale the device time by work (throughput-bound)
and keep its launch overhead (wall - device). Host time comes from the nearest point.

The ranking rule (:func:`order`) depends on how the data was measured. Where the file says its
candidates were called as tkreg.ops calls them (``meta["calls"]`` is CALLS_AS_TKREG: a kernel's
launches replayed where it declares replay, the peer as torch code calls it), its host times are
what a call through tkreg.ops pays, and the least cost per call when calls are queued back to
back wins: max(wall, host), what tkreg.ops' own tuning measures; on equal terms a kernel goes
before the peer. In older files the host time is the launcher's Python time, which tkreg.ops no
longer pays for replayed kernels: there the smallest estimated wall time wins, except that
candidates within TIE of the fastest count as equally fast, and among those the one with the
least max(wall, host) wins; on equal terms a kernel goes before the peer.
Nothing here imports torch.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import json
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..core import dtypes, refs
from ..core.platform import Platform
from ..core.specs import Op

PEER = "peer"  # the name measured rows give the op's peer
KIND = "ops_ranking"  # the records kind of a ranking data file
ENV_VAR = "TKREG_RANKING_DATA"  # a ranking data file to use instead of the ones plugins ship
CALLS_AS_TKREG = "as tkreg.ops calls them"  # meta["calls"] of data measured so (tkreg.bench.ranking)
# Wall times within 3% count as equal: a tie-break then costs at most 3% of wall time, inside the
# 5% a pick may trail the fastest kernel by, with 2% left for run-to-run noise.
TIE = 0.03
SAME_WORK = 1e-9  # relative difference in work below which a point is the query itself


@dataclass(frozen=True)
class Point:
    """One measured candidate on one input signature."""

    op: str
    impl: str
    dtype: str
    dims: Mapping[str, int]
    layout: str
    wall_us: float
    device_us: float | None = None
    host_us: float | None = None

    @property
    def label(self) -> str:
        shape = "x".join(str(v) for v in self.dims.values())
        return f"{shape} ({self.layout})" if self.layout not in ("", "contiguous") else shape


@dataclass(frozen=True)
class Estimate:
    """A candidate's cost per call for some inputs, and what it rests on."""

    wall_us: float
    device_us: float | None
    host_us: float | None
    basis: str

    @property
    def steady_us(self) -> float:
        """Per call when calls are queued back to back: the GPU's time or the launcher's."""
        return max(self.wall_us, self.host_us or 0.0)

    def describe(self) -> str:
        parts = [f"device {self.device_us:.1f} us" if self.device_us is not None else "",
                 f"host {self.host_us:.1f} us" if self.host_us is not None else ""]
        detail = ", ".join(p for p in parts if p)
        return f"{self.wall_us:.1f} us per call" + (f" ({detail})" if detail else "") + f"; {self.basis}"


@dataclass
class Measurements:
    """The measured points of one device and the model over them."""

    device: str
    capability: str
    date: str = ""
    command: str = ""
    points: list[Point] = field(default_factory=list)
    calls: str = ""  # how the candidates were called: CALLS_AS_TKREG, or "" (launchers called directly)

    @classmethod
    def from_document(cls, document: Mapping[str, Any]) -> Measurements:
        """From a records envelope of kind "ops_ranking"."""
        if document.get("kind") != KIND:
            raise ValueError(f"not a ranking data file: kind {document.get('kind')!r}, expected {KIND!r}")
        meta = document.get("meta", {})
        points = [
            Point(
                op=r["op"],
                impl=r["impl"],
                dtype=r["dtype"],
                dims=dict(r["dims"]),
                layout=r.get("layout", ""),
                wall_us=float(r["wall_us"]),
                device_us=_optional_float(r.get("device_us")),
                host_us=_optional_float(r.get("host_us")),
            )
            for r in document.get("rows", [])
            if r.get("wall_us") is not None
        ]
        return cls(meta.get("device", ""), str(meta.get("capability", "")), meta.get("date", ""), meta.get("command", ""), points,
                   meta.get("calls", ""))  # fmt: skip

    @functools.cached_property
    def _by_candidate(self) -> dict[tuple[str, str, str], list[Point]]:
        table: dict[tuple[str, str, str], list[Point]] = {}
        for p in self.points:
            table.setdefault((p.op, p.impl, p.dtype), []).append(p)
        return table

    def covers(self, op: str) -> bool:
        return any(p.op == op for p in self.points)

    def estimate(self, op: Op, impl: str, dtype: str, dims: Mapping[str, int], layout: str, shape_class: Any) -> Estimate | None:
        """``impl``'s cost per call on inputs of ``dims`` and ``layout``, or None when it was not
        measured for this op and dtype (or an equivalent one). ``shape_class(dims) -> str``."""
        points, as_dtype = self._candidate_points(op.name, impl, dtype)
        if not points:
            return None
        itemsize = dtypes.ITEMSIZE[dtype]
        cls = shape_class(dims)
        chosen, scope = _nearest_group(points, layout, cls, shape_class)
        work = _work(op, dims, itemsize)
        curve = sorted(((_work(op, p.dims, itemsize), p) for p in chosen), key=lambda wp: wp[0])
        estimate = _interpolate(curve, work)
        where = f"{self.device}, {self.date[:10]}" if self.date else self.device
        notes = "; ".join(n for n in (scope, f"measured as {as_dtype}" if as_dtype != dtype else "") if n)
        return replace(estimate, basis=f"{estimate.basis} ({where}{'; ' + notes if notes else ''})")

    def _candidate_points(self, op: str, impl: str, dtype: str) -> tuple[list[Point], str]:
        points = self._by_candidate.get((op, impl, dtype), [])
        if points:
            return points, dtype
        for other in _same_width_dtypes(dtype):
            points = self._by_candidate.get((op, impl, other), [])
            if points:
                return points, other
        return [], dtype


def _optional_float(value: Any) -> float | None:
    return None if value is None else float(value)


def _same_width_dtypes(dtype: str) -> list[str]:
    """Float dtypes of the same width (fp16 and bf16 move the same bytes through the same code)."""
    if dtype not in ("float16", "bfloat16"):
        return []
    return [d for d in ("float16", "bfloat16") if d != dtype]


def _work(op: Op, dims: Mapping[str, int], itemsize: int) -> float:
    cost = refs.resolve(op.cost)(dims, itemsize)
    return float(cost.bytes if op.bound == "memory" else cost.flops or cost.bytes)


def _nearest_group(points: list[Point], layout: str, cls: str, shape_class: Any) -> tuple[list[Point], str]:
    """The points to interpolate among: same class and layout, else same layout, else same
    class, else all; with a note saying which when it is not the first."""
    same_layout = [p for p in points if p.layout == layout]
    same_class = [p for p in points if shape_class(p.dims) == cls]
    both = [p for p in same_layout if shape_class(p.dims) == cls]
    if both:
        return both, ""
    if same_layout:
        return same_layout, f"no measurement in the {cls} class; from other classes"
    if same_class:
        return same_class, f"no measurement with layout {layout}; from other layouts"
    return points, f"no measurement in the {cls} class or with layout {layout}"


def _interpolate(curve: list[tuple[float, Point]], work: float) -> Estimate:
    works = [w for w, _ in curve]
    for w, p in curve:
        if abs(w - work) <= SAME_WORK * max(w, work):
            return Estimate(p.wall_us, p.device_us, p.host_us, f"measured at {p.label}")
    i = bisect.bisect_left(works, work)
    if i == 0:
        w, p = curve[0]
        return Estimate(p.wall_us, p.device_us, p.host_us, f"as at {p.label}, the smallest measured size")
    if i == len(curve):
        w, p = curve[-1]
        scale = work / w
        if p.device_us is None:
            return Estimate(p.wall_us * scale, None, p.host_us, f"scaled by work from {p.label}, the largest measured size")
        device = p.device_us * scale
        launch = max(0.0, p.wall_us - p.device_us)
        basis = f"device time scaled by work from {p.label}, the largest measured size"
        return Estimate(device + launch, device, p.host_us, basis)
    (w0, p0), (w1, p1) = curve[i - 1], curve[i]
    t = (math.log(work) - math.log(w0)) / (math.log(w1) - math.log(w0))
    device = _log_lerp(p0.device_us, p1.device_us, t)
    host = p0.host_us if t < 0.5 else p1.host_us
    return Estimate(_log_lerp(p0.wall_us, p1.wall_us, t) or 0.0, device, host, f"interpolated between {p0.label} and {p1.label}")


def _log_lerp(a: float | None, b: float | None, t: float) -> float | None:
    if a is None or b is None or a <= 0 or b <= 0:
        return None
    return math.exp((1 - t) * math.log(a) + t * math.log(b))


# -- the ranking rule ---------------------------------------------------------------------------
def order(estimates: Mapping[str, Estimate], peer: str | None = None, queued: bool = False) -> list[tuple[str, str]]:
    """Candidates best first, each with why it ranks where it does (see the module docstring).
    ``peer`` names the candidate that is the op's peer, which loses ties to kernels; ``queued``:
    rank by the cost per queued call alone (data measured as tkreg.ops calls)."""
    if not estimates:
        return []

    def by_cost(n: str) -> tuple[Any, ...]:  # the cost per queued call, kernels before the peer
        return estimates[n].steady_us, n == peer, estimates[n].wall_us, n

    def estimated(e: Estimate) -> str:
        return f"estimated {e.steady_us:.1f} us per queued call: {e.describe()}" if queued else f"estimated {e.describe()}"

    if queued:
        tied: list[str] = []
        ranked = sorted(estimates, key=by_cost)
    else:
        best = min(e.wall_us for e in estimates.values())
        tied = sorted((n for n, e in estimates.items() if e.wall_us <= best * (1 + TIE)), key=by_cost)
        ranked = tied + sorted((n for n in estimates if n not in tied), key=lambda n: (estimates[n].wall_us, n == peer, n))
    why = [(ranked[0], estimated(estimates[ranked[0]]))]
    for above, name in itertools.pairwise(ranked):
        e, a = estimates[name], estimates[above]
        if name in tied:
            why.append((name, f"ranked below {above}: as fast within {TIE:.0%} ({e.wall_us:.1f} vs {a.wall_us:.1f} us) "
                              f"but costs {e.steady_us:.1f} us per queued call against {a.steady_us:.1f} "
                              f"(estimated {e.describe()})"))
        else:
            why.append((name, f"ranked below {above}: {estimated(e)}"))
    return why


# -- finding the data for a platform --------------------------------------------------------------
def data_files(op: Op) -> list[Path]:
    """The ranking data files for ``op``: $TKREG_RANKING_DATA if set (none while that file does not
    exist yet), else those in the folder the op names (``Op.measured``)."""
    chosen = os.environ.get(ENV_VAR)
    if chosen:
        return [Path(chosen)] if Path(chosen).is_file() else []
    folder = op_folder(op)
    return sorted(folder.glob("*.json")) if folder is not None and folder.is_dir() else []


def op_folder(op: Op) -> Path | None:
    """The folder ``Op.measured`` names ("package:folder"), found through the package's location
    (no import of the package's modules beyond its __init__)."""
    if op.measured is None:
        return None
    import importlib.util

    package, _, folder = op.measured.partition(":")
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / folder


def for_platform(platform: Platform, op: Op) -> Measurements | None:
    """Measurements of ``op`` on this GPU: a file measured on a device of the same name, else (for
    a real device, not a bare capability) one of the same capability; None for the interpreter
    or a capability alone, whose ranking stays by priority and score."""
    if not platform.is_gpu or not platform.name:
        return None
    return _for_device(platform.name, platform.capability, tuple(str(p) for p in data_files(op)))


def described(op: Op) -> list[str]:
    """Each ranking data file of ``op`` in a line (for ``tkreg info``): the GPU, the date, how the
    candidates were called and how many points; a file that cannot be read says why."""
    lines = []
    for path in data_files(op):
        try:
            m = load(str(path))
        except (OSError, ValueError, KeyError) as e:
            lines.append(f"{path.name}: unreadable ({type(e).__name__}: {e})")
            continue
        calls = "called as tkreg.ops calls them" if m.calls == CALLS_AS_TKREG else "launchers called directly"
        lines.append(f"{m.device} ({m.date[:10] or 'undated'}; {calls}; {len(m.points)} points)")
    return lines


@functools.lru_cache(maxsize=64)
def _for_device(name: str, capability: tuple[int, int] | None, paths: tuple[str, ...]) -> Measurements | None:
    loaded = [load(p) for p in paths]
    for m in loaded:
        if m.device == name:
            return m
    wanted = f"{capability[0]}.{capability[1]}" if capability else ""
    for m in loaded:
        if wanted and m.capability == wanted:
            return m
    return None


@functools.lru_cache(maxsize=64)
def load(path: str) -> Measurements:
    return Measurements.from_document(json.loads(Path(path).read_text()))


# -- ranking a registry's kernels by these estimates ----------------------------------------------
AUTO = "auto"  # rank with the measurements the op's plugin ships for the platform (for_platform)


class WallTimeRanker:
    """A :data:`tkreg.core.registry.Ranker`: the measured kernels (and the op's peer) by the rule
    of :func:`order`, then the unmeasured ones in priority order. It answers nothing (the
    registry keeps its priority order) where no measurement covers the op on that platform."""

    def __init__(self, measurements: Measurements | str | None = AUTO) -> None:
        self.measurements = measurements

    def measurements_for(self, platform: Platform, op: Op) -> Measurements | None:
        if self.measurements == AUTO:
            return for_platform(platform, op)
        return self.measurements  # type: ignore[return-value]

    def __call__(self, registry: Any, op: Op, platform: Platform, runnable: list[Any], inputs: Any) -> Any:
        from ..core.registry import Ranking, Verdict
        from .forms import form_for

        measurements = self.measurements_for(platform, op)
        if measurements is None or not measurements.covers(op.name):
            return None
        # The op's calling contract names the kernel inputs' dims (as its cases and cost model
        # name them), its layout word and its shape class (a function of the op's own plugin).
        form = form_for(op)
        try:
            dims = form.dims(inputs)
            layout = form.layout(inputs)
            dtype = dtypes.name_of(inputs[0].dtype)
        except (AttributeError, IndexError, TypeError, ValueError):  # inputs this form cannot describe
            return None
        if dims is None or dtype not in dtypes.ITEMSIZE:
            return None

        def estimate(impl: str) -> Estimate | None:
            return measurements.estimate(op, impl, dtype, dims, layout, form.shape_class)

        estimates = {v.kernel.name: e for v in runnable if (e := estimate(v.kernel.name)) is not None}
        if not estimates:
            return None
        peer_label = f"peer {op.peer_name}"
        peer = estimate(PEER) if op.peer is not None else None
        candidates = {**estimates, **({peer_label: peer} if peer is not None else {})}
        why = dict(order(candidates, peer=peer_label, queued=measurements.calls == CALLS_AS_TKREG))
        ranks = {name: i for i, name in enumerate(why)}
        measured = sorted((v for v in runnable if v.kernel.name in estimates), key=lambda v: ranks[v.kernel.name])
        ranked = [Verdict(v.kernel, (), why[v.kernel.name], v.score, estimates[v.kernel.name]) for v in measured]
        for v in runnable:
            if v.kernel.name not in estimates:
                text = (f"no wall-time measurement of {v.kernel.name} for {op.name} on {measurements.device}; "
                        "ranked after the measured kernels")
                ranked.append(Verdict(v.kernel, (), text, v.score))
        return Ranking(tuple(ranked), peer, next(iter(why)) == peer_label, why.get(peer_label, ""))


def rank_by(registry: Any, measurements: Measurements | str | None = AUTO) -> WallTimeRanker:
    """Make ``registry`` rank by these measurements (default: those shipped for the platform;
    None: none), replacing a wall-time ranker it had; returns the ranker."""
    for old in registry.rankers():
        if isinstance(old, WallTimeRanker):
            registry.remove_ranker(old)
    ranker = WallTimeRanker(measurements)
    registry.add_ranker(ranker)
    return ranker


def ensure_ranker(registry: Any) -> None:
    """Give ``registry`` the shipped-measurements ranker unless it has a wall-time ranker."""
    if not any(isinstance(r, WallTimeRanker) for r in registry.rankers()):
        registry.add_ranker(WallTimeRanker())
