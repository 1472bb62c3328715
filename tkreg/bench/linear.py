"""The ``linear`` suite: each op with a linear contract (``tkreg.contracts.linear``) on model
shapes, tkreg's choice against the op's peer (cuBLAS for the built-in one).

Cases: the op's benchmark cases (for the built-in op: Llama-3-8B's projections at M = 16, 128,
2048 and 16384 tokens, B as a (K, N) matrix and as the transposed view of an (N, K) weight, as
F.linear passes it; Qwen2-7B's fused QKV projection with a bias; 3000 x 5000 x 2000; 8192 x 8192
x K), plus every (N, K) at M = 64 in the
layouts the benchmark cases give it; in bf16 and fp16. Per case and dtype: the peer,
``tkreg.ops.<op>`` (whatever its dispatch picks, output allocated as a user's call does), and
every registered kernel at its launcher's own choice. Device time by tkreg.testing.timing.DeviceTimer as the benchmark items
measure it (L2 flushed before each call, so a weight comes from DRAM as in a forward pass; CUPTI's
span of the call; median), with a shorter measurement (TIMER_MS of repetitions). Every output is
checked against the float64 product with the op's tolerance (``ok``).
"""

from __future__ import annotations

import statistics
from typing import Any

from ..core.loading import default_registry
from ..core.registry import Registry
from ..core.specs import Case, Op
from ..report.figures import geomean
from ..testing import harness
from ..testing.checking import compare
from .calls import Signature, launcher_call, launchers, make_inputs, make_output, ops_call, peer_call, say
from .suites import Deadline, Measured, SuiteFailed

DTYPES = ("bfloat16", "float16")
EXTRA_M = 64  # decode with a larger batch: not among the op's benchmark token counts
TIMER_MS = 40.0  # device time of the measured repetitions per timing (the benchmark items: 100)
WARMUP_MS = 3.0  # the warm-up step compiled every variant already
MAX_REPS = 100  # a median of 100 is steady to well under 1%; the flushes would cost the rest
PEER = "cuBLAS"
OPS = "tkreg.ops"


def linear_ops(registry: Registry) -> list[Op]:
    return [op for op in registry.ops() if op.contract.kind == "linear"]


def cases(op: Op) -> list[Case]:
    """The op's benchmark cases, then every (N, K) of those with a layout variant (the model
    projections) at M = EXTRA_M, in each layout the benchmark cases give it."""
    found = list(op.cases_in("bench"))
    projections = {(c.dims["N"], c.dims["K"]) for c in found if c.variant}
    layouts = dict.fromkeys((c.dims["N"], c.dims["K"], c.variant) for c in found
                            if (c.dims["N"], c.dims["K"]) in projections)  # fmt: skip
    for n, k, variant in layouts:
        extra = Case(dims={"M": EXTRA_M, "N": n, "K": k}, variant=variant)
        if extra not in found:
            found.append(extra)
    return found


def layout_of(op: Op, inputs: tuple[Any, ...]) -> str:
    """"nk" where the linear contract reads B column-major (the transposed view of an (N, K)
    weight), else "kn" (B stored (K, N)); then "+name" for each further input the call passes
    (an optional one given, e.g. "nk+bias"), so such calls get rows of their own."""
    from ..ops.forms import form_for

    word = "nk" if form_for(op).layout(inputs[:2]).endswith("b col") else "kn"
    names = op.inputs[2:] or tuple(f"input{i}" for i in range(2, len(inputs)))
    return word + "".join(f"+{name}" for name, t in zip(names, inputs[2:]) if t is not None)


def dtypes_of(op: Op) -> list[str]:
    return [d for d in DTYPES if d in op.dtypes]


def signatures(registry: Registry) -> list[Signature]:
    return [Signature.of(op.name, c.dims, dtype, c.variant) for op in linear_ops(registry) for c in cases(op)
            for dtype in dtypes_of(op)]  # fmt: skip


def calls_of(explanation: str) -> str:
    """Which kernel ``tkreg.ops.explain`` says a call runs ("peer" for the op's peer)."""
    words = explanation.split()
    if " calls its peer" in explanation or len(words) < 3:
        return "peer"
    return words[2]


def time_case(registry: Registry, timer: Any, sig: Signature, deadline: Deadline) -> list[dict[str, Any]]:
    """Every implementation on one case and dtype: device time, TFLOP/s, ratio to cuBLAS, correctness."""
    import torch

    from .. import ops

    op = registry.op(sig.op)
    inputs = make_inputs(registry, sig)
    # the best a kernel can return is the exact product rounded once to the output's dtype
    expected = harness.float64_reference(op, inputs)[0].to(getattr(torch, sig.dtype)).double()
    tolerance = op.tolerance(sig.dtype, sig.case)
    dims = dict(sig.dims)
    base = {"op": sig.op, "M": dims["M"], "N": dims["N"], "K": dims["K"], "layout": layout_of(op, inputs), "dtype": sig.dtype}
    flops = 2.0 * dims["M"] * dims["N"] * dims["K"]
    rows, peer_ms = [], None
    impls: list[tuple[str, Any, Any, dict[str, Any]]] = []
    out = make_output(registry, sig, inputs)
    impls.append((PEER, peer_call(op, inputs, out), lambda o=out: o, {}))
    ops_fn = ops_call(op, inputs)
    if ops_fn is not None:
        impls.append((OPS, ops_fn, None, {"calls": calls_of(ops.explain(op.name, *inputs))}))
    for name, launcher in launchers(registry, op, inputs).items():
        kernel_out = make_output(registry, sig, inputs)
        impls.append((name, launcher_call(op, launcher, inputs, kernel_out), lambda o=kernel_out: o, {}))
    for impl, fn, output, extra in impls:
        if fn is None:
            continue
        deadline.check(f"{impl} on {sig.label}")
        try:
            result = fn()
            written = output() if output is not None else result
            torch.cuda.synchronize()
            comparison = compare(written, expected, tolerance, unwritten=harness.unwritten_mask(written))
            ms = device_ms(timer, fn)
        except torch.OutOfMemoryError:
            raise
        except Exception as e:  # one implementation failing is a finding: its row says why
            rows.append({**base, "impl": impl, **extra, "ok": False, "error": f"{type(e).__name__}: {str(e)[:200]}"})
            say(f"  {sig.label} {impl}: {type(e).__name__}: {e}")
            continue
        peer_ms = ms if impl == PEER else peer_ms
        row = {**base, "impl": impl, **extra, "ms": ms, "tflops": flops / ms * 1e-9, "ok": comparison.ok}
        if peer_ms is not None:
            row["vs_cublas"] = peer_ms / ms
        if not comparison.ok:
            row["error"] = comparison.report().splitlines()[0]
            say(f"  WRONG {sig.label} {impl}: {row['error']}")
        rows.append(row)
    return rows


def device_ms(timer: Any, fn: Any) -> float:
    """Median device time (ms), as DeviceTimer.measure takes it but with at most MAX_REPS
    repetitions: a decode-sized call is a few microseconds behind an L2 flush ten times longer."""
    import torch

    reps = min(MAX_REPS, timer.reps_for(timer.warmup(fn)))
    read = timer.queue(fn, reps)
    torch.cuda.synchronize()
    return statistics.median(read())


def summary_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per implementation and dtype: the geometric mean and the lowest of the ratios to cuBLAS."""
    ratios: dict[str, dict[str, list[float]]] = {}
    for r in rows:
        if r["impl"] != PEER and "vs_cublas" in r:
            ratios.setdefault(r["impl"], {}).setdefault(r["dtype"], []).append(r["vs_cublas"])
    return {impl: {dtype: {"geomean": geomean(v), "lowest": min(v), "cases": len(v)} for dtype, v in by_dtype.items()}
            for impl, by_dtype in ratios.items()}  # fmt: skip


def measure(deadline: Deadline) -> Measured:
    import torch

    from ..testing.timing import DeviceTimer

    registry = default_registry()
    if not linear_ops(registry):
        raise SuiteFailed("no op with a linear contract is registered")
    timer = DeviceTimer(target_ms=TIMER_MS, warmup_ms=WARMUP_MS)
    rows: list[dict[str, Any]] = []
    sigs = signatures(registry)
    for i, sig in enumerate(sigs):
        rows += time_case(registry, timer, sig, deadline)
        torch.cuda.empty_cache()
        if i % 8 == 7:
            say(f"  {i + 1} of {len(sigs)} cases")
    summary = summary_of(rows)
    for impl, by_dtype in summary.items():
        ratios = ", ".join(f"{d} {s['geomean']:.3f}x cuBLAS (lowest {s['lowest']:.2f})" for d, s in by_dtype.items())
        say(f"  {impl}: {ratios}")
    wrong = [f"{r['impl']} {r['M']}x{r['N']}x{r['K']} {r['layout']} {r['dtype']}" for r in rows if not r["ok"]]
    notes = (f"device time: tkreg.testing.timing.DeviceTimer (L2 flushed, CUPTI span, median, {TIMER_MS:g} ms of repetitions); "
             "layout kn: B is (K, N) row-major; nk: B is the transposed view of an (N, K) weight; +bias: a bias passed. "
             f"tkreg.ops allocates its output. Outputs wrong or failed: {', '.join(wrong) or 'none'}.")  # fmt: skip
    return Measured(kind="matmul_models", rows=rows, notes=notes, summary={"vs_cublas": summary})
