"""Tables the benchmark record is built from: summaries of a benchmark run (kernels against their
peer, the best kernel per case, one kernel's speed-ups per variant) and any tkreg.report.records envelope
as a generic table with its provenance. Only the standard library."""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ..core.dtypes import SHORT_NAMES
from .markdown import percent, table
from .results import PEER_PREFIX, Result

META_SHOWN = ("device", "capability", "sms", "date", "command", "torch", "triton", "python")


def _cases(results: Sequence[Result]) -> list[tuple[str, str]]:
    return list(dict.fromkeys((r.case, r.dtype) for r in results))


def _peer_name(results: Sequence[Result]) -> str:
    peer = next((r.kernel for r in results if r.is_peer), PEER_PREFIX + "peer")
    return peer.removeprefix(PEER_PREFIX)


def vs_peer_table(results: Sequence[Result]) -> str:
    """Per case and dtype: the peer's throughput, and each kernel's (at its launcher's own
    configuration) with its speed-up over the peer."""
    own = [r for r in results if not r.config]
    kernels = sorted({r.kernel for r in own if not r.is_peer})
    unit = next((r.unit for r in own if r.unit), "")
    by_case = {(r.case, r.dtype, r.kernel): r for r in own}
    rows = []
    for case, dtype in _cases(own):
        peer = next((r for r in own if r.is_peer and (r.case, r.dtype) == (case, dtype)), None)
        cells = []
        for k in kernels:
            r = by_case.get((case, dtype, k))
            cells.append("-" if r is None or r.throughput is None else f"{r.throughput:.0f} ({_speedup(r, 3)})")
        rows.append([case, SHORT_NAMES.get(dtype, dtype), _rate(peer), *cells])
    headers = ["shape", "dtype", f"{_peer_name(own)} {unit}", *(f"{k} {unit} (x peer)" for k in kernels)]
    return table(headers, rows, [False, False, *[True] * (len(headers) - 2)])


def best_table(results: Sequence[Result]) -> str:
    """Per case and dtype: the fastest kernel at its launcher's own configuration, against the peer."""
    own = [r for r in results if not r.config]
    unit = next((r.unit for r in own if r.unit), "")
    rows = []
    for case, dtype in _cases(own):
        group = [r for r in own if (r.case, r.dtype) == (case, dtype)]
        peer = next((r for r in group if r.is_peer), None)
        kernels = [r for r in group if not r.is_peer and r.throughput is not None]
        if not kernels:
            continue
        best = max(kernels, key=lambda r: r.throughput or 0.0)
        short = SHORT_NAMES.get(dtype, dtype)
        rows.append([case, short, _rate(peer), best.kernel, _rate(best), percent(best.fraction), _speedup(best, 2)])
    headers = ["shape", "dtype", f"{_peer_name(own)} {unit}", "best kernel", unit, "of ceiling", "vs peer"]
    return table(headers, rows, [False, False, True, False, True, True, True])


def speedup_table(results: Sequence[Result], kernel: str, by: str, where: Mapping[str, str]) -> str:
    """One kernel's speed-up over the peer, one row per dtype and value of the config key ``by``,
    one column per case, with the geometric mean and the lowest; only items whose config, less
    ``by``, is exactly ``where``."""
    ratios: dict[tuple[str, str], dict[str, float]] = {}
    for r in results:
        config = dict(r.config)
        variant = config.pop(by, "-")
        if r.kernel == kernel and config == dict(where) and r.speedup is not None:
            ratios.setdefault((SHORT_NAMES.get(r.dtype, r.dtype), variant), {})[r.case] = r.speedup
    cases = list(dict.fromkeys(c for by_case in ratios.values() for c in by_case))
    rows = []
    for (dtype, variant), by_case in sorted(ratios.items()):
        values = list(by_case.values())
        geomean = math.exp(sum(map(math.log, values)) / len(values))
        cols = [f"{by_case[c]:.2f}" if c in by_case else "-" for c in cases]
        rows.append([dtype, variant, *cols, f"{geomean:.3f}", f"{min(values):.2f}"])
    headers = ["dtype", by, *cases, "geomean", "lowest"]
    return table(headers, rows, [False, False, *[True] * (len(cases) + 2)])


def _rate(r: Result | None) -> str:
    return "-" if r is None or r.throughput is None else f"{r.throughput:.0f}"


def _speedup(r: Result, digits: int) -> str:
    return "-" if r.speedup is None else f"{r.speedup:.{digits}f}x"


# ---- tkreg.report.records envelopes ---------------------------------------------------------------------
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


def record_table(document: Mapping[str, Any]) -> str:
    """A tkreg.report.records envelope as Markdown: its provenance, one row per row (columns in the order
    they first appear), then its notes."""
    rows = list(document.get("rows") or [])
    columns = list(dict.fromkeys(key for row in rows for key in row))
    numeric = [all(_is_number(row[c]) for row in rows if c in row) for c in columns]
    parts = [f"*{document['kind']}*: {provenance(document.get('meta') or {})}", ""]
    parts.append(table(columns, [[cell(row.get(c)) for c in columns] for row in rows], numeric) if rows else "(no rows)")
    notes = str(document.get("notes") or "").strip()
    if notes:
        parts += ["", *(f"> {line}" if line else ">" for line in notes.splitlines())]
    return "\n".join(parts)


def matmul_suite_table(document: Mapping[str, Any]) -> str:
    """scripts/gpu/matmul_suite.py's rows as one line per case, layout and dtype: cuBLAS TFLOP/s,
    then the launcher's pick at the time of the run and the fastest measured config of each kernel
    as ratios to cuBLAS, and the geometric mean of the fastest Hopper config per dtype."""
    cases: dict[tuple[Any, ...], dict[str, list[Mapping[str, Any]]]] = {}
    for row in document.get("rows") or []:
        if "ms" in row:
            key = (row["M"], row["N"], row["K"], row["layout"], row["dtype"])
            cases.setdefault(key, {}).setdefault(row["kernel"], []).append(row)
    lines, best_ratios = [], {}
    for (M, N, K, layout, dtype), kernels in cases.items():
        if "cublas" not in kernels:
            continue
        cublas = min(r["ms"] for r in kernels["cublas"])
        short = dtype.replace("bfloat", "bf").replace("float", "fp")
        cells = [f"{M}x{N}x{K}", layout, short, f"{2 * M * N * K / cublas * 1e-9:.0f}"]
        for kernel in ("hopper", "triton"):
            rows = kernels.get(kernel, [])
            pick = next((r for r in rows if r.get("pick")), None)
            best = min(rows, key=lambda r: r["ms"]) if rows else None
            cells.append(f"{cublas / pick['ms']:.2f}" if pick else "-")
            cells.append(f"{cublas / best['ms']:.2f} ({best['config']})" if best else "-")
            if kernel == "hopper" and best:
                best_ratios.setdefault(dtype, []).append(cublas / best["ms"])
        lines.append(cells)
    columns = ["M x N x K", "B", "dtype", "cuBLAS TFLOP/s", "hopper pick", "hopper best (config)", "triton pick",
               "triton best (config)"]  # fmt: skip
    numeric = [False, False, False, True, True, False, True, False]
    parts = [f"*{document['kind']}*: {provenance(document.get('meta') or {})}", "", table(columns, lines, numeric), ""]
    for dtype, ratios in best_ratios.items():
        geomean = math.exp(statistics.fmean(math.log(r) for r in ratios))
        parts.append(f"- {dtype}: fastest Hopper config per case at a geometric mean of {geomean:.3f}x cuBLAS "
                     f"over {len(ratios)} cases, lowest {min(ratios):.2f}x")  # fmt: skip
    return "\n".join(parts)
