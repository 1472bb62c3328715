"""Tables the benchmark record is built from: a benchmark run's kernels against their peer, and
one table per ``tkreg bench`` suite's envelope (timer, host, linear, ranking), each with a line
saying where, when and by which command it was measured. Only the standard library.

The suite tables also read the files the one-off scripts wrote before ``tkreg bench`` existed
(the same measurements under older column names), so older runs stay readable.
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.dtypes import SHORT_NAMES
from .markdown import percent, table
from .results import PEER_PREFIX, Result

META_SHOWN = ("device", "capability", "sms", "gpus", "date", "command", "torch", "triton", "python")
VERSIONS = ("torch", "triton", "tkreg", "driver")


# ---- a benchmark run (pytest-benchmark JSON) -------------------------------------------------------
def _cases(results: Sequence[Result]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r.case, r.dtype) for r in results))


def _is_plain_peer(r: Result) -> bool:
    """The op's peer itself (a rival is timed like a peer but compared with it)."""
    return r.is_peer and not getattr(r, "is_rival", False)


def _peer_name(results: Sequence[Result]) -> str:
    peer = next((r.kernel for r in results if _is_plain_peer(r)), PEER_PREFIX + "peer")
    return peer.removeprefix(PEER_PREFIX)


def vs_peer_table(results: Sequence[Result]) -> str:
    """Per case and dtype: the peer's throughput, and each kernel's and rival's (at its launcher's
    own configuration) with its fraction of the ceiling and its speed-up over the peer."""
    own = [r for r in results if not r.config]
    kernels = sorted({r.kernel for r in own if not _is_plain_peer(r)})
    unit = next((r.unit for r in own if r.unit), "")
    by_case = {(r.case, r.dtype, r.kernel): r for r in own}
    rows = []
    for case, dtype in _cases(own):
        peer = next((r for r in own if _is_plain_peer(r) and (r.case, r.dtype) == (case, dtype)), None)
        cells = []
        for k in kernels:
            r = by_case.get((case, dtype, k))
            shown = "-" if r is None or r.throughput is None else f"{r.throughput:.0f} ({percent(r.fraction)}; {_speedup(r, 2)})"
            cells.append(shown)
        rows.append([case, SHORT_NAMES.get(dtype, dtype), _rate(peer, with_fraction=True), *cells])
    kernel_headers = (f"{k} {unit} (of ceiling; x peer)" for k in kernels)
    headers = ["shape", "dtype", f"{_peer_name(own)} {unit} (of ceiling)", *kernel_headers]
    return table(headers, rows, [False, False, *[True] * (len(headers) - 2)])


def best_table(results: Sequence[Result]) -> str:
    """Per case and dtype: the fastest kernel at its launcher's own configuration, against the peer
    and against each rival timed in the same run (torch.compile, another library)."""
    own = [r for r in results if not r.config]
    unit = next((r.unit for r in own if r.unit), "")
    rivals = sorted({r.kernel for r in own if r.is_peer and not _is_plain_peer(r)})
    rows = []
    for case, dtype in _cases(own):
        group = [r for r in own if (r.case, r.dtype) == (case, dtype)]
        peer = next((r for r in group if _is_plain_peer(r)), None)
        kernels = [r for r in group if not r.is_peer and r.throughput is not None]
        if not kernels:
            continue
        best = max(kernels, key=lambda r: r.throughput or 0.0)
        short = SHORT_NAMES.get(dtype, dtype)
        against = []
        for rival in rivals:
            other = next((r for r in group if r.kernel == rival), None)
            against.append("-" if other is None else f"{other.median_ms / best.median_ms:.2f}x")
        rows.append([case, short, _rate(peer), best.kernel, _rate(best), percent(best.fraction), _speedup(best, 2), *against])
    headers = ["shape", "dtype", f"{_peer_name(own)} {unit}", "best kernel", unit, "of ceiling", "vs peer",
               *(f"vs {r.removeprefix(PEER_PREFIX)}" for r in rivals)]  # fmt: skip
    return table(headers, rows, [False, False, True, False, True, True, True, *(True for _ in rivals)])


def peer_summary(results: Sequence[Result]) -> str:
    """One line: each kernel's geometric mean and lowest speed-up over the peer, at its own choice."""
    speedups: dict[str, list[float]] = {}
    for r in results:
        if not r.config and not _is_plain_peer(r) and r.speedup:
            speedups.setdefault(r.kernel, []).append(r.speedup)
    if not speedups:
        return ""
    parts = [f"{k} {geomean(v):.3f}x (lowest {min(v):.2f}x, {len(v)} cases)" for k, v in sorted(speedups.items())]
    return "Over the peer, geometric mean: " + "; ".join(parts) + "."


def ceilings_line(results: Sequence[Result]) -> str:
    """The ceilings measured in the run, by unit."""
    found = {(r.unit, r.ceiling_name): r.ceiling for r in results if r.ceiling}
    if not found:
        return ""
    parts = [f"{value:.0f} {unit}" + (f" ({name})" if name else "") for (unit, name), value in found.items()]
    return "Ceilings measured in the same run: " + ", ".join(parts) + "."


def _rate(r: Result | None, with_fraction: bool = False) -> str:
    if r is None or r.throughput is None:
        return "-"
    return f"{r.throughput:.0f} ({percent(r.fraction)})" if with_fraction and r.fraction is not None else f"{r.throughput:.0f}"


def _speedup(r: Result, digits: int) -> str:
    return "-" if r.speedup is None else f"{r.speedup:.{digits}f}x"


def geomean(values: Sequence[float]) -> float:
    values = [v for v in values if v and v > 0]
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else math.nan


# ---- envelopes: provenance and a generic table ------------------------------------------------------
def cell(value: Any) -> str:
    """A value as a table cell: floats to about four significant digits, containers as JSON."""
    if value is None:
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "-"
        return f"{value:.0f}" if abs(value) >= 1e4 else f"{value:#.4g}".rstrip(".")
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, separators=(",", ":"), default=str)
    return str(value).replace("\n", " ")


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def provenance(meta: Mapping[str, Any]) -> str:
    """Where, when and how a record was measured, in one line."""
    parts = [f"{key}: {cell(meta[key])}" for key in META_SHOWN if meta.get(key) and key != "command"]
    if meta.get("command"):
        parts.append(f"command: `{meta['command']}`")
    parts += [f"{key}: {cell(v)}" for key, v in meta.items() if key not in META_SHOWN and key != "host"]
    return "; ".join(parts)


def source_line(path: str, meta: Mapping[str, Any]) -> str:
    """`path`: measured <date> by `<command>`; the versions, in one line."""
    date = str(meta.get("date", "")).replace("T", " ").removesuffix("Z")
    when = f" measured {date} UTC" if date and date[:1].isdigit() else f" measured {date}" if date else ""
    how = f" by `{meta['command']}`" if meta.get("command") else ""
    versions = ", ".join(f"{key} {meta[key]}" for key in VERSIONS if meta.get(key))
    host = f" on a host of {meta['gpus']} GPUs" if str(meta.get("gpus", "1")) != "1" else ""
    return f"Data: `{path}`,{when}{host}{how}" + (f" ({versions})" if versions else "") + "."


def record_table(document: Mapping[str, Any], columns: Sequence[str] | None = None) -> str:
    """Any envelope's rows as a table (``columns`` where given, in that order, else every column in
    the order they first appear)."""
    rows = list(document.get("rows") or [])
    if columns is None:
        columns = list(dict.fromkeys(key for row in rows for key in row))
    numeric = [all(_is_number(row[c]) for row in rows if c in row) for c in columns]
    if not rows:
        return "(no rows)"
    return table(list(columns), [[cell(row.get(c)) for c in columns] for row in rows], numeric)


def notes_quote(document: Mapping[str, Any]) -> str:
    notes = str(document.get("notes") or "").strip()
    return "\n".join(f"> {line}" if line else ">" for line in notes.splitlines())


def envelope_section(document: Mapping[str, Any], path: str = "") -> str:
    """An envelope as Markdown: its provenance, its rows, its notes."""
    meta = document.get("meta") or {}
    head = source_line(path, meta) if path else f"*{document.get('kind')}*: {provenance(meta)}"
    parts = [head, "", record_table(document)]
    quote = notes_quote(document)
    return "\n".join(parts + (["", quote] if quote else []))


# ---- the suites' envelopes ------------------------------------------------------------------------
def _ms(value: Any) -> str:
    return "-" if not _is_number(value) or math.isnan(value) else f"{value:.4f}"


def timer_table(document: Mapping[str, Any]) -> str:
    """The timer suite: per workload and round, the timer against CUPTI, untraced events, do_bench
    and wall time (ms); the verdicts; what tracing costs."""
    rows = []
    for r in document.get("rows") or []:
        ratio = r.get("tkreg_over_cupti")
        shown = "-" if not _is_number(ratio) or math.isnan(ratio) else f"{ratio:.4f}"
        times = [_ms(r.get(key)) for key in ("tkreg_ms", "cupti_ms")] + [shown]
        times += [_ms(r.get(key)) for key in ("stream_ms", "do_bench_ms", "wall_ms")]
        labels = [str(r.get(key, "")) for key in ("workload", "bound")] + [str(r.get("round", 0))]
        rows.append([*labels, *times, str(r.get("source", ""))])
    headers = ["workload", "bound", "round", "tkreg", "CUPTI", "tkreg / CUPTI", "untraced events", "do_bench", "wall",
               "device time from"]  # fmt: skip
    parts = [table(headers, rows, [False, False, True, True, True, True, True, True, True, False])]
    summary = document.get("summary") or {}
    verdicts = summary.get("verdicts") or [line for line in str(document.get("notes", "")).splitlines()
                                           if line.startswith(("PASS", "FAIL"))]  # fmt: skip
    if verdicts:
        parts += ["", *(f"- {line}" for line in verdicts)]
    costs = summary.get("costs")
    if costs:
        parts += ["", _costs_line(costs)]
    return "\n".join(parts)


def _costs_line(costs: Mapping[str, Any]) -> str:
    said = []
    if _is_number(costs.get("host_us_before_cupti")):
        said.append(f"{costs.get('workload', 'a launcher')}: {costs['host_us_before_cupti']:.1f} us of host time per call "
                    f"before the process's first CUPTI trace, {costs['host_us_after_cupti']:.1f} us after the last")  # fmt: skip
        if _is_number(costs.get("control_us_before_cupti")):
            said[-1] += (f" (a CPU-only control call, for the host's own drift: {costs['control_us_before_cupti']:.2f} us "
                         f"before, {costs['control_us_after_cupti']:.2f} us after)")  # fmt: skip
    if _is_number(costs.get("with_cupti_s")):
        said.append(f"a measurement of {costs.get('reps', '?')} repetitions takes {costs['with_cupti_s'] * 1e3:.0f} ms "
                    f"traced, {costs['without_cupti_s'] * 1e3:.0f} ms untraced")  # fmt: skip
    if _is_number(costs.get("copy_gbps_eager")):
        said.append(f"a 2 GiB device copy runs at {costs['copy_gbps_eager']:.0f} GB/s queued by the caller (the copy "
                    f"ceiling) and {costs['copy_gbps_graph']:.0f} GB/s replayed from a CUDA graph")  # fmt: skip
    return ("Also measured: " + "; ".join(said) + ".") if said else ""


def host_table(document: Mapping[str, Any]) -> str:
    """The host suite: per op and path, us per call and the queueing alone, against the peer's call
    that allocates as this path does (its own outputs, or a given one)."""
    rows = list(document.get("rows") or [])
    def alike(r: Mapping[str, Any]) -> tuple[Any, ...]:  # the peer's row a row is held against
        return r.get("op"), bool(r.get("allocates")), bool(r.get("grad")), r.get("autocast") or "", bool(r.get("absent"))

    peer_us = {alike(r): r["us_per_call"] for r in rows if r.get("peer") and _is_number(r.get("us_per_call"))}
    body, shown = [], None
    for r in rows:
        us, base = r.get("us_per_call"), alike(r)
        ratio = us / peer_us[base] if _is_number(us) and base in peer_us else None
        shape = " ".join(x for x in (str(r.get("shape", "")), SHORT_NAMES.get(str(r.get("dtype", "")), "")) if x)
        what = f"{r.get('op', '-')} {shape}".strip()
        body.append(["" if what == shown else what, str(r.get("path", "")), _us(us), _us(r.get("host_us")),
                     "-" if ratio is None else f"{ratio:.2f}x"])  # fmt: skip
        shown = what  # the op and its input once per run of rows: the record has a size bound
    headers = ["op, input", "what is called", "us per call", "of which queueing", "x the peer's, allocating alike"]
    text = table(headers, body, [False, False, True, True, True])
    summary = {op: v for op, v in (document.get("summary") or {}).items() if isinstance(v, Mapping)}
    if summary:
        said = [_host_goals(op, v) for op, v in sorted(summary.items()) if _is_number(v.get("ops_over_torch"))]
        under_autocast = any("amp_ops_over_torch" in v for v in summary.values())
        amp = " and on float32 inputs under autocast(bfloat16)" if under_autocast else ""
        text += ("\n\ntkreg.ops against torch's own allocating call (goal: at most 1.3x), what torch.ops.tkreg "
                 "costs beyond it (goal: at most 5 us), and tkreg.ops against the peer's call where the inputs want "
                 f"a gradient{amp}: " + ", ".join(said) + ".")  # fmt: skip
    plan_key = (document.get("summary") or {}).get("plan_key")
    if isinstance(plan_key, str):
        text += f" tkreg.ops' plan key (C++ or Python, see tkreg.ops.native): {plan_key}."
    return text


def _host_goals(op: str, found: Mapping[str, Any]) -> str:
    """One op's host summary: tkreg.ops over torch, then what else was found, in brackets."""
    extra = []
    if _is_number(found.get("operator_extra_us")):
        extra.append(f"operator +{found['operator_extra_us']:.1f} us")
    if _is_number(found.get("grad_ops_over_torch")):
        extra.append(f"{found['grad_ops_over_torch']:.2f}x with a gradient wanted")
    if _is_number(found.get("amp_ops_over_torch")):
        extra.append(f"{found['amp_ops_over_torch']:.2f}x under autocast")
    if _is_number(found.get("absent_ops_over_torch")):
        extra.append(f"{found['absent_ops_over_torch']:.2f}x with its optional inputs None")
    return f"{op} {found['ops_over_torch']:.2f}x" + (f" ({'; '.join(extra)})" if extra else "")


def _spread(sorted_ratios: Sequence[float]) -> str:
    """"1.1x to 3.4x"; "1.1x to 10897x" (tenths from 10x up say nothing)."""
    return " to ".join(f"{x:.1f}x" if x < 10 else f"{x:.0f}x" for x in (sorted_ratios[0], sorted_ratios[-1]))


def _median(sorted_values: Sequence[float]) -> float:
    return sorted_values[len(sorted_values) // 2]


def _us(value: Any) -> str:
    return f"{value:.1f}" if _is_number(value) else "-"


LINEAR_PEER = "cuBLAS"


def linear_rows(document: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The linear suite's rows (impl, M, N, K, layout, dtype, ms, vs_cublas, ok); rows of an older
    run's configuration sweep (no ``impl``) are left out."""
    return [dict(r) for r in document.get("rows") or [] if "ms" in r and "impl" in r]


def linear_table(document: Mapping[str, Any]) -> str:
    """One line per case and layout: cuBLAS's TFLOP/s per dtype, then each implementation's ratio to
    cuBLAS per dtype ("!" marks a wrong output); then geometric means."""
    rows = linear_rows(document)
    dtypes = list(dict.fromkeys(r["dtype"] for r in rows))
    impls = [i for i in dict.fromkeys(r["impl"] for r in rows) if i != LINEAR_PEER]
    by = {(r["M"], r["N"], r["K"], r["layout"], r["dtype"], r["impl"]): r for r in rows}
    shapes = list(dict.fromkeys((r["M"], r["N"], r["K"], r["layout"]) for r in rows))
    short = "/".join(SHORT_NAMES.get(d, d) for d in dtypes)
    body = []
    for M, N, K, layout in shapes:
        line = [f"{M}x{N}x{K}", str(layout)]
        line.append(" / ".join(_tflops(by.get((M, N, K, layout, d, LINEAR_PEER))) for d in dtypes))
        for impl in impls:
            line.append(" / ".join(_ratio(by.get((M, N, K, layout, d, impl))) for d in dtypes))
        body.append(line)
    headers = ["M x N x K", "B", f"cuBLAS TFLOP/s ({short})", *(f"{i} x cuBLAS ({short})" for i in impls)]
    parts = [table(headers, body, [False, False, *[True] * (len(headers) - 2)])]
    for impl in impls:
        means = []
        for d in dtypes:
            ratios = [r["vs_cublas"] for r in rows if r["impl"] == impl and r["dtype"] == d and _is_number(r.get("vs_cublas"))]
            if ratios:
                means.append(f"{SHORT_NAMES.get(d, d)} {geomean(ratios):.3f}x (lowest {min(ratios):.2f}x, {len(ratios)} cases)")
        if means:
            parts.append(f"- {impl}: geometric mean " + "; ".join(means))
    calls = [r for r in rows if r.get("calls")]
    if calls:
        picked = tally(r["calls"] for r in calls)
        parts.append("- tkreg.ops called: " + ", ".join(f"{name} ({n} cases)" for name, n in picked))
    return "\n".join([parts[0], "", *parts[1:]] if len(parts) > 1 else parts)


def tally(values: Any) -> list[tuple[str, int]]:
    """(value, count), the most frequent first."""
    counts: dict[str, int] = {}
    for v in values:
        counts[str(v)] = counts.get(str(v), 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _tflops(r: Mapping[str, Any] | None) -> str:
    return "-" if r is None or not _is_number(r.get("tflops")) else f"{r['tflops']:.0f}"


def _ratio(r: Mapping[str, Any] | None) -> str:
    if r is None or not _is_number(r.get("vs_cublas")):
        return "-"
    return f"{r['vs_cublas']:.2f}" + ("" if r.get("ok", True) else "!")


def ranking_points(document: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, float]]:
    """(op, dtype, signature) -> impl -> wall us; from the suite's rows or the older format, whose
    rows name the signature ("add 1024x1024 float32")."""
    points: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in document.get("rows") or []:
        if not _is_number(r.get("wall_us")):
            continue
        if "signature" in r:
            words = str(r["signature"]).split()
            op, dtype = words[0], next((w for w in words if w in SHORT_NAMES), "")
            key = (op, dtype, str(r["signature"]))
        else:
            dims = "x".join(str(v) for v in (r.get("dims") or {}).values())
            key = (str(r.get("op")), str(r.get("dtype")), f"{dims} {r.get('dtype')} {r.get('layout', '')}")
        points.setdefault(key, {})[str(r.get("impl"))] = float(r["wall_us"])
    return points


def ranking_table(document: Mapping[str, Any]) -> str:
    """Per op and dtype: how many signatures were measured, which candidate was fastest by wall
    time how often, and the fastest kernel's wall time over the peer's (geometric mean)."""
    groups: dict[tuple[str, str], list[dict[str, float]]] = {}
    for (op, dtype, _), walls in ranking_points(document).items():
        groups.setdefault((op, dtype), []).append(walls)
    body = []
    for (op, dtype), signatures in sorted(groups.items()):
        fastest = tally(min(walls, key=walls.get) for walls in signatures)  # type: ignore[arg-type]
        ratios = [walls["peer"] / min(v for k, v in walls.items() if k != "peer") for walls in signatures
                  if "peer" in walls and len(walls) > 1]  # fmt: skip
        body.append([op, SHORT_NAMES.get(dtype, dtype), str(len(signatures)), ", ".join(f"{k} {n}" for k, n in fastest),
                     "-" if not ratios else f"{geomean(ratios):.2f}x"])  # fmt: skip
    headers = ["op", "dtype", "signatures", "fastest by wall time (signatures)", "best kernel x peer (geomean)"]
    return table(headers, body, [False, False, True, False, True])


def dispatch_table(document: Mapping[str, Any]) -> str:
    """The dispatch suite: tkreg.ops' choice on shapes nobody chose (per op), a cold process with a
    warm cache, CUDA graphs, compiled and training use."""
    rows = list(document.get("rows") or [])
    summary = document.get("summary") or {}
    picks = [r for r in rows if r.get("check") == "pick" and _is_number(r.get("ratio"))]
    body = []
    for op in sorted({r["op"] for r in picks}):
        mine = [r for r in picks if r["op"] == op]
        choices = [r["choice_ratio"] for r in mine if _is_number(r.get("choice_ratio"))]
        body.append([op, str(len(mine)), f"{sum(1 for r in mine if r.get('choice_pass'))}",
                     f"{min(choices):.2f}" if choices else "-", f"{sum(1 for r in mine if r.get('pass'))}",
                     f"{geomean(r['ratio'] for r in mine):.2f}"])  # fmt: skip
    parts = [
        f"Random shapes (seed {summary.get('seed', '?')}): the candidate tkreg.ops chose was within 5% of the fastest "
        f"on {summary.get('choices_within', '?')} of {summary.get('picks', '?')}; tkreg.ops end to end (its dispatch "
        f"included) on {summary.get('picks_within', '?')} (geomean {summary.get('pick_geomean', '?')} of the fastest).",
        "",
        table(["op", "shapes", "choice within 5%", "worst choice", "tkreg.ops within 5%", "tkreg.ops / fastest (geomean)"],
              body, [False, True, True, True, True, True]),
    ]  # fmt: skip
    replayed = _replayed_text(picks)
    if replayed:
        parts += ["", replayed]
    inside = _inside_buckets_text([r for r in rows if r.get("check") == "bucket" and _is_number(r.get("ratio"))])
    if inside:
        parts += ["", inside]
    cold = [r for r in rows if r.get("check") == "cold" and _is_number(r.get("first_us")) and r.get("warm_us")]
    failed = [r for r in rows if r.get("check") == "cold" and r.get("error")]
    if cold or failed:
        parts += ["", " ".join(part for part in (_cold_text(cold), _cold_failures(failed)) if part)]
    graphs = [r for r in rows if r.get("check") == "graph"]
    if graphs:
        if all("runs" in r for r in graphs):  # what each captured call ran (older records do not say)
            same = [f"{r['op']} ({r['runs']})" for r in graphs if r.get("same_bits")]
            said = "the bits of an eager call of what it ran"
        else:
            same, said = [r["op"] for r in graphs if r.get("same_bits")], "the eager call's bits"
        parts += ["", f"CUDA graphs: a tuned call captured and replayed gave {said} for "
                  f"{', '.join(same) or 'none'} ({len(same)} of {len(graphs)} ops)."]  # fmt: skip
    work = []
    for r in rows:
        if r.get("check") == "compiled_mlp" and _is_number(r.get("ratio")):
            work.append([f"Llama MLP block, {r['tokens']} tokens, torch.compile", _us(r.get("tkreg_us")),
                         _us(r.get("torch_compile_us")), _ratio_with_rounds(r, "ratio")])  # fmt: skip
            if _is_number(r.get("graphs_ratio")):
                work.append([f"Llama MLP block, {r['tokens']} tokens, torch.compile reduce-overhead",
                             _us(r.get("tkreg_graphs_us")), _us(r.get("torch_graphs_us")),
                             _ratio_with_rounds(r, "graphs_ratio")])  # fmt: skip
            work.append([f"Llama MLP block, {r['tokens']} tokens, eager", _us(r.get("eager_tkreg_us")),
                         _us(r.get("eager_torch_us")), f"{r['eager_torch_us'] / r['eager_tkreg_us']:.3f}"])  # fmt: skip
        if r.get("check") == "training" and _is_number(r.get("ratio")):
            how = f", float32 weights under autocast({r['autocast']})" if r.get("autocast") else ""
            work.append([f"2-layer MLP training step, {r['tokens']} tokens{how}", _us(r.get("tkreg_us")), _us(r.get("torch_us")),
                         _ratio_with_rounds(r, "ratio")])  # fmt: skip
        if r.get("check") == "row_training" and _is_number(r.get("ratio")):
            work.append([f"{r['op']} forward and backward, {r['shape']}", _us(r.get("tkreg_us")), _us(r.get("torch_us")),
                         _ratio_with_rounds(r, "ratio")])  # fmt: skip
    if work:
        rounds = any(f"{k}_quartiles" in r for r in rows for k in ("ratio", "graphs_ratio"))
        parts += ["", table(["workload (bf16)", "through tkreg.ops (us)", "torch (us)",
                             "torch / tkreg (by round: quartiles)" if rounds else "torch / tkreg"], work,
                            [False, True, True, True])]  # fmt: skip
    coded = [r for r in rows if r.get("check") == "compiled_mlp" and "same_code" in r]
    if coded:
        same = [str(r["tokens"]) for r in coded if r["same_code"]]
        parts += ["", f"Inductor generated the same code for the block through tkreg.ops as for torch's at "
                  f"{' and '.join(same) or 'no'} tokens ({len(same)} of {len(coded)} block sizes)."]  # fmt: skip
    return "\n".join(parts)


def _ratio_with_rounds(row: Mapping[str, Any], key: str) -> str:
    """A workload's ratio of medians, and where the row has them the quartiles of the same ratio
    round by round: how far one run's reading could move (a host-bound step spreads widely)."""
    spread = row.get(f"{key}_quartiles")
    text = f"{row[key]:.3f}"
    if isinstance(spread, list) and len(spread) == 2 and all(_is_number(v) for v in spread):
        text += f" ({spread[0]:.2f}-{spread[1]:.2f})"
    return text


def _replayed_text(picks: Sequence[Mapping[str, Any]]) -> str:
    """The picks replayed from CUDA graphs: tkreg.ops (its choice for captured calls) against the
    fastest replayed, and what the eager choice would have given there."""
    replayed = [r for r in picks if _is_number(r.get("graph_ratio"))]
    if not replayed:
        return ""
    eager = []
    for r in replayed:
        times = {k: v for k, v in (r.get("graphed_us") or {}).items() if k != "tkreg.ops" and _is_number(v)}
        if times and r.get("chosen") in times:
            eager.append(min(times.values()) / times[r["chosen"]])
    switched = sum(1 for r in replayed if r.get("graph_chosen") not in (None, r.get("chosen")))
    text = (f"Replayed from CUDA graphs (each call captured a few hundred times over, the replays timed: the calls' "
            f"GPU time alone), tkreg.ops was within 5% of the fastest replayed on "
            f"{sum(1 for r in replayed if r.get('graph_pass'))} of {len(replayed)} shapes (geomean "
            f"{geomean(r['graph_ratio'] for r in replayed):.3f}); a captured call ran another candidate than an eager "
            f"one on {switched}.")  # fmt: skip
    if eager:
        text += (f" The eager choice, replayed, would have been within 5% on {sum(1 for x in eager if x >= 0.95)} of "
                 f"{len(eager)} (geomean {geomean(eager):.3f}).")  # fmt: skip
    return text


def _inside_buckets_text(siblings: Sequence[Mapping[str, Any]]) -> str:
    """Other shapes of tuned buckets: did they time nothing, and did the first shape's choice hold."""
    if not siblings:
        return ""
    held = [r for r in siblings if r.get("same_bucket") and r.get("timing_calls") == 0]
    text = (f"Inside the buckets: another shape of {len(siblings)} buckets (every size over 8 redrawn within it) "
            f"found the first shape's choice and timed nothing on {len(held)}")
    if held:
        text += (f"; tkreg.ops was within 5% of the fastest for its own inputs on {sum(1 for r in held if r.get('pass'))} "
                 f"of {len(held)} (geomean {geomean(r['ratio'] for r in held):.3f}), the choice called directly on "
                 f"{sum(1 for r in held if r.get('choice_pass'))}")  # fmt: skip
        odd = [r for r in held if r.get("odd_width")]
        if odd:  # recorded before odd widths were a bucket of their own
            text += f" (of them {len(odd)} of an odd width, {sum(1 for r in odd if r.get('pass'))} within 5%)"
    own = [r for r in siblings if r.get("own_bucket")]
    if own:
        text += (f"; {len(own)} of odd widths (rows off 16 bytes: another bucket) were timed in a bucket of their own, "
                 f"{sum(1 for r in own if r.get('pass'))} of them then within 5%")
    text += "."
    return text


def _cold_text(cold: Sequence[Mapping[str, Any]]) -> str:
    """A cold process with the warm cache, without and with tkreg.ops.warm() first: how each was
    set up and its timing calls, then a table of first calls against warm calls (where the peer
    runs the shape and where a kernel does; torch's own alike), then what the table leans on."""
    said, body = [], []
    for warmed in (False, True):
        mine = [r for r in cold if bool(r.get("warmed")) is warmed]
        if not mine:
            continue
        kinds = [("every shape", mine)]  # older records do not say what ran each shape
        if all("runs" in r for r in mine):
            kinds = [("the peer runs", [r for r in mine if r["runs"] == "peer"]),
                     ("a kernel runs", [r for r in mine if r["runs"] != "peer"])]  # fmt: skip
        for what, group in kinds:
            if group:
                firsts = [(r["first_us"], r["warm_us"], _after_work(r)) for r in group]
                body.append(_cold_row(f"tkreg.ops, {_cold_process(warmed)}", what, firsts))
        warm_said = f"tkreg.ops.warm() took {mine[0].get('warm_s', '?')} s"
        if "install_s" not in mine[0]:  # older records timed installing tkreg.ops inside warm()
            warm_said += ", installing tkreg.ops included"
        setup = [_installed(mine), warm_said if warmed else _preloaded(mine)]
        setup_said = "; ".join(part for part in setup if part)
        timed = sum(r.get("timing_calls", 0) for r in mine)
        said.append(f"The cold process {_cold_process(warmed)}{f' ({setup_said})' if setup_said else ''} made {timed} "
                    f"timing calls.")  # fmt: skip
    plain = [r for r in cold if not r.get("warmed")]
    peers_first = all(r.get("peers_first") for r in cold)  # older records made each peer's first call just before tkreg's
    torch_first = [(r["torch_first_us"], r["torch_warm_us"], _after_work(r, "torch_")) for r in plain
                   if _is_number(r.get("torch_first_us")) and r.get("torch_warm_us")]  # fmt: skip
    if torch_first:
        when = "in a pass before tkreg's" if peers_first else "just before tkreg's"
        body.append(_cold_row(f"torch's own first call, {when}", "every shape", torch_first))
    here = [r for r in plain if _is_number(r.get("torch_at_same_point_us")) and r.get("torch_warm_us")]
    if here:
        firsts = [(r["torch_at_same_point_us"], r["torch_warm_us"], None) for r in here]
        body.append(_cold_row("torch's own call at the point of tkreg's first call", "every shape", firsts))
    if not body:
        return ""
    headers = ["calls", "shapes", "count", "first call within 2x of a warm call",
               "within 2x of a warm call after the same work", "first / warm (median)", "range"]  # fmt: skip
    text = " ".join(said) + "\n\n" + table(headers, body, [False, False, True, True, True, True, False])
    notes = " ".join(_cold_notes(cold, bool(torch_first), here, peers_first))
    return text + ("\n\n" + notes if notes else "")


def _cold_row(calls: str, shapes: str, firsts: Sequence[tuple[float, float, float | None]]) -> list[str]:
    """A row of the cold-process table from (first, warm, warm after the same work or None) per shape."""
    ratios = sorted(first / warm for first, warm, _ in firsts)
    after = [first / later for first, _, later in firsts if later]
    return [calls, shapes, str(len(ratios)), str(sum(x <= 2.0 for x in ratios)),
            f"{sum(x <= 2.0 for x in after)} of {len(after)}" if after else "-", f"{_median(ratios):.1f}x",
            _spread(ratios)]  # fmt: skip


def _cold_notes(
    cold: Sequence[Mapping[str, Any]], torch_timed: bool, here: Sequence[Mapping[str, Any]], peers_first: bool
) -> list[str]:
    """What the cold-process table leans on: the order of the calls (where torch's first calls
    were timed), what the misses had in common with torch's own calls at the same point (the rows
    ``here`` that have one) and tkreg's first calls in that process, the host's part of the first
    calls' cost, the driver's allocations and the base rate of a one-sample miss."""
    said = []
    if torch_timed:
        said.append("The peer's own first and warm calls of every shape came first, in a pass of their own; then "
                    "tkreg's, each right after the previous shape's warm calls." if peers_first else
                    "Each tkreg first call came right after the peer's own first and warm calls of the shape.")  # fmt: skip
    if here:
        missed = [r for r in here if r["first_us"] > 2 * r["warm_us"]]
        also = sum(r["torch_at_same_point_us"] > 2 * r["torch_warm_us"] for r in missed)
        said.append(f"torch's own call at the point of tkreg's first call was made by a process of its own making the same "
                    f"calls, right before tkreg's first call of the shape. Of the {len(missed)} tkreg first calls over 2x "
                    f"a warm call as a model would call them, torch's was over 2x there too on {also}.")  # fmt: skip
    same_process = [r for r in here if _is_number(r.get("first_after_torch_at_same_point_us"))
                    and r.get("warm_in_same_point_process_us")]  # fmt: skip
    if same_process:
        within = sum(r["first_after_torch_at_same_point_us"] <= 2 * r["warm_in_same_point_process_us"] for r in same_process)
        said.append(f"In that process, tkreg's first call right after torch's was within 2x of a warm call on {within} "
                    f"of {len(same_process)}.")  # fmt: skip
    host = _host_part(cold)
    if host:
        said.append(host)
    counted = [r for r in cold if _is_number(r.get("device_allocs"))]
    if counted:
        grew = sum(r["device_allocs"] > 0 for r in counted)
        said.append(f"{grew} of the {len(counted)} tkreg first calls took memory from the driver (every shape's "
                    f"inputs were made first).")  # fmt: skip
    spread = [r for r in cold if _is_number(r.get("warm_over_2x")) and _is_number(r.get("warm_calls"))]
    if spread:  # the base rate of a one-sample miss (.bench.dispatch.cold._first_and_warm)
        said.append(f"A first call is one sample: of the warm calls behind the medians, each also one sample, "
                    f"{sum(r['warm_over_2x'] for r in spread)} of {sum(r['warm_calls'] for r in spread)} took over "
                    f"twice their shape's median.")  # fmt: skip
    if any(_after_work(r) for r in cold):
        work = ("ten of the previous shape's calls, as each first call came right after the previous shape's warm calls"
                if peers_first else "ten of the peer's calls, as the first call was")  # fmt: skip
        said.append(f"A warm call after the same work is one right after {work} (median of three): a call after other "
                    "work costs more than one of a run of calls.")  # fmt: skip
    return said


def _host_part(cold: Sequence[Mapping[str, Any]]) -> str:
    """How much of what tkreg's first calls cost over a warm call the host paid (to the call's
    return), per cold process, leaving out the process's first call (which preloads), where the
    record timed the host's part."""
    parts = []
    for warmed in (False, True):
        mine = [r for r in cold if bool(r.get("warmed")) is warmed and _is_number(r.get("first_host_us"))][1:]
        if mine:
            host = sorted(r["first_host_us"] - r["warm_host_us"] for r in mine)
            total = sorted(r["first_us"] - r["warm_us"] for r in mine)
            parts.append(f"{_median(host):.1f} of {_median(total):.1f} us {_cold_process(warmed)}")
    if not parts:
        return ""
    return f"The host's part of a first call's cost over a warm call (median; the process's first left out): {', '.join(parts)}."


def _cold_process(warmed: bool) -> str:
    """Which of the two cold processes: one that called tkreg.ops.warm() first, or not."""
    return "after tkreg.ops.warm()" if warmed else "calling each shape as a model would"


def _cold_failures(failed: Sequence[Mapping[str, Any]]) -> str:
    """The cold processes that gave no figures, and why (a time limit, a crash)."""
    return " ".join(f"The cold process {_cold_process(bool(r.get('warmed')))} gave no figures: {r['error']}." for r in failed)


def _installed(rows: Sequence[Mapping[str, Any]]) -> str:
    """How long installing tkreg.ops took in the process (plugins, torch operators), before its
    calls or warm(), where the record says."""
    seconds = rows[0].get("install_s")
    return "" if seconds is None else f"installing tkreg.ops took {seconds} s"


def _preloaded(rows: Sequence[Mapping[str, Any]]) -> str:
    """What the process's first call loaded ahead (tkreg.ops.warming.preload), where it says."""
    said = next((r["preload"] for r in rows if isinstance(r.get("preload"), Mapping)), None)
    if said is None:
        return ""
    left = f", {said['left']} left to their first calls" if said.get("left") else ""
    return (f"its first call, the process's first through tkreg.ops, loaded {said.get('signatures')} remembered "
            f"kernel signatures ahead in {said.get('seconds')} s{left}")  # fmt: skip


def _after_work(row: Mapping[str, Any], prefix: str = "") -> float | None:
    """A cold row's warm call made after the same work as its first call (us), under the name its
    record gives it: after the previous shape's calls, or in older records after the peer's (or,
    for torch's own, after tkreg's)."""
    older = "torch_warm_after_tkreg_us" if prefix else "warm_after_peer_us"
    got = row.get(f"{prefix}warm_after_same_work_us", row.get(older))
    return got if _is_number(got) and got else None


def linear_ops(document: Mapping[str, Any]) -> set[str]:
    """The ops the linear suite's table covers."""
    return {str(r["op"]) for r in linear_rows(document) if r.get("op")}


# Suites with a table per case of some ops: the main job's section of those ops is a summary.
SUITE_OPS: dict[str, Callable[[Mapping[str, Any]], set[str]]] = {"linear": linear_ops}

SUITE_TABLES: dict[str, Callable[[Mapping[str, Any]], str]] = {
    "dispatch": dispatch_table,
    "timer": timer_table,
    "host": host_table,
    "linear": linear_table,
    "ranking": ranking_table,
}
