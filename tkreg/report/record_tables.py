"""Tables the benchmark record is built from: a benchmark run's kernels against their peer, and
one table per ``tkreg bench`` suite's envelope (timer, host, linear, ranking; the dispatch
suite's in :mod:`.dispatch_record`), each with a line saying where, when and by which command it
was measured. Only the standard library.

The suite tables also read the files the one-off scripts wrote before ``tkreg bench`` existed
(the same measurements under older column names), so older runs stay readable.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from ..core.dtypes import SHORT_NAMES
from .dispatch_record import dispatch_table
from .figures import geomean, is_number, us_text
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
    numeric = [all(is_number(row[c]) for row in rows if c in row) for c in columns]
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
    return "-" if not is_number(value) or math.isnan(value) else f"{value:.4f}"


def timer_table(document: Mapping[str, Any]) -> str:
    """The timer suite: per workload and round, the timer against CUPTI, untraced events, do_bench
    and wall time (ms); the verdicts; what tracing costs."""
    rows = []
    for r in document.get("rows") or []:
        ratio = r.get("tkreg_over_cupti")
        shown = "-" if not is_number(ratio) or math.isnan(ratio) else f"{ratio:.4f}"
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
    if is_number(costs.get("host_us_before_cupti")):
        said.append(f"{costs.get('workload', 'a launcher')}: {costs['host_us_before_cupti']:.1f} us of host time per call "
                    f"before the process's first CUPTI trace, {costs['host_us_after_cupti']:.1f} us after the last")  # fmt: skip
        if is_number(costs.get("control_us_before_cupti")):
            said[-1] += (f" (a CPU-only control call, for the host's own drift: {costs['control_us_before_cupti']:.2f} us "
                         f"before, {costs['control_us_after_cupti']:.2f} us after)")  # fmt: skip
    if is_number(costs.get("with_cupti_s")):
        said.append(f"a measurement of {costs.get('reps', '?')} repetitions takes {costs['with_cupti_s'] * 1e3:.0f} ms "
                    f"traced, {costs['without_cupti_s'] * 1e3:.0f} ms untraced")  # fmt: skip
    if is_number(costs.get("copy_gbps_eager")):
        said.append(f"a 2 GiB device copy runs at {costs['copy_gbps_eager']:.0f} GB/s queued by the caller (the copy "
                    f"ceiling) and {costs['copy_gbps_graph']:.0f} GB/s replayed from a CUDA graph")  # fmt: skip
    return ("Also measured: " + "; ".join(said) + ".") if said else ""


def host_table(document: Mapping[str, Any]) -> str:
    """The host suite: per op and path, us per call and the queueing alone, against the peer's call
    that allocates as this path does (its own outputs, or a given one)."""
    rows = list(document.get("rows") or [])
    def alike(r: Mapping[str, Any]) -> tuple[Any, ...]:  # the peer's row a row is held against
        return r.get("op"), bool(r.get("allocates")), bool(r.get("grad")), r.get("autocast") or "", bool(r.get("absent"))

    peer_us = {alike(r): r["us_per_call"] for r in rows if r.get("peer") and is_number(r.get("us_per_call"))}
    body, shown = [], None
    for r in rows:
        us, base = r.get("us_per_call"), alike(r)
        ratio = us / peer_us[base] if is_number(us) and base in peer_us else None
        shape = " ".join(x for x in (str(r.get("shape", "")), SHORT_NAMES.get(str(r.get("dtype", "")), "")) if x)
        what = f"{r.get('op', '-')} {shape}".strip()
        body.append(["" if what == shown else what, str(r.get("path", "")), us_text(us), us_text(r.get("host_us")),
                     "-" if ratio is None else f"{ratio:.2f}x"])  # fmt: skip
        shown = what  # the op and its input once per run of rows: the record has a size bound
    headers = ["op, input", "what is called", "us per call", "of which queueing", "x the peer's, allocating alike"]
    text = table(headers, body, [False, False, True, True, True])
    summary = {op: v for op, v in (document.get("summary") or {}).items() if isinstance(v, Mapping)}
    if summary:
        said = [_host_goals(op, v) for op, v in sorted(summary.items()) if is_number(v.get("ops_over_torch"))]
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
    if is_number(found.get("operator_extra_us")):
        extra.append(f"operator +{found['operator_extra_us']:.1f} us")
    if is_number(found.get("grad_ops_over_torch")):
        extra.append(f"{found['grad_ops_over_torch']:.2f}x with a gradient wanted")
    if is_number(found.get("amp_ops_over_torch")):
        extra.append(f"{found['amp_ops_over_torch']:.2f}x under autocast")
    if is_number(found.get("absent_ops_over_torch")):
        extra.append(f"{found['absent_ops_over_torch']:.2f}x with its optional inputs None")
    return f"{op} {found['ops_over_torch']:.2f}x" + (f" ({'; '.join(extra)})" if extra else "")


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
            ratios = [r["vs_cublas"] for r in rows if r["impl"] == impl and r["dtype"] == d and is_number(r.get("vs_cublas"))]
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
    return "-" if r is None or not is_number(r.get("tflops")) else f"{r['tflops']:.0f}"


def _ratio(r: Mapping[str, Any] | None) -> str:
    if r is None or not is_number(r.get("vs_cublas")):
        return "-"
    return f"{r['vs_cublas']:.2f}" + ("" if r.get("ok", True) else "!")


def ranking_points(document: Mapping[str, Any]) -> dict[tuple[str, str, str], dict[str, float]]:
    """(op, dtype, signature) -> impl -> wall us; from the suite's rows or the older format, whose
    rows name the signature ("add 1024x1024 float32")."""
    points: dict[tuple[str, str, str], dict[str, float]] = {}
    for r in document.get("rows") or []:
        if not is_number(r.get("wall_us")):
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
