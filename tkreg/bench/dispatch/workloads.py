"""Compiled and training use: a Llama MLP block under torch.compile, a 2-layer MLP training step,
each differentiable row op's forward and backward at model sizes, and batched linear calls, each
against the same through torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from ...core import refs
from ...core.registry import Registry
from ...core.specs import Op
from ..calls import Signature, make_inputs, say
from .picks import TIMING_BUDGET_S, round_quartiles

MLP = {"hidden": 4096, "intermediate": 14336}  # Llama-3-8B
MLP_TOKENS = (16, 4096)
ROW_TRAINING = ((4096, 4096), (16384, 4096))  # (tokens, width) of a model's row ops (a norm): M, N
TRAIN = {"hidden": 4096, "inner": 16384}
# A step of 2048 tokens (a few ms, GPU-bound), and a small batch's step of 256, host-bound (about
# 440 us of GPU time in 1.0-1.2 ms on an H200), where tkreg.ops' own cost per call would show.
TRAIN_TOKENS = (2048, 256)
# Many short rounds rather than a few long ones: a host-bound training step (100-300 us, nearly
# all host time) read 0.87 and 1.15 of torch with nine rounds of 30 ms on an H100 (2026-11-27),
# for calls that run torch's own code either way.
WORKLOAD_ROUND_MS = 10.0
WORKLOAD_ROUNDS = 25


def _wall_us(calls: dict[str, Callable[[], Any]], ratios: dict[str, tuple[str, str]] | None = None) -> dict[str, Any]:
    """Per call, back to back, the calls' rounds interleaved (a clock change hits them alike);
    rounds of at least WORKLOAD_ROUND_MS (a training step is a few ms: one call per round would
    leave a median of a handful of samples). ``ratios``: for each name, the (numerator,
    denominator) calls whose ratio of medians the row gets under that name, and whose ratio round
    by round is summarized as ``<name>_quartiles``, the first and third quartile
    (:func:`.picks.round_quartiles`)."""
    from ...ops.measuring import measure as time_calls

    rounds: dict[str, list[float]] = {}
    got = time_calls(calls, TIMING_BUDGET_S, round_ms=WORKLOAD_ROUND_MS, rounds=WORKLOAD_ROUNDS, per_round=rounds)
    bad = {k: v for k, v in got.items() if not isinstance(v, float)}
    if bad:
        raise RuntimeError(str(bad))
    row: dict[str, Any] = {k: round(v, 2) for k, v in got.items()}
    for name, (over, under) in (ratios or {}).items():
        row[name] = round(row[over] / row[under], 4)
        row[f"{name}_quartiles"] = round_quartiles(rounds[over], rounds[under])
    return row


def compiled_mlp(mm: Callable[..., Any], op: str) -> list[dict[str, Any]]:
    import torch
    import torch.nn.functional as F

    rows: list[dict[str, Any]] = []
    h, i = MLP["hidden"], MLP["intermediate"]
    weights = [torch.randn(n, k, device="cuda", dtype=torch.bfloat16) / math.sqrt(k) for n, k in ((i, h), (i, h), (h, i))]

    def with_torch(x: Any, wg: Any, wu: Any, wd: Any) -> Any:
        return (F.silu(x @ wg.t()) * (x @ wu.t())) @ wd.t()

    def with_tkreg(x: Any, wg: Any, wu: Any, wd: Any) -> Any:
        return mm(F.silu(mm(x, wg.t())) * mm(x, wu.t()), wd.t())

    for tokens in MLP_TOKENS:
        rows.append(_mlp_row(op, tokens, weights, with_torch, with_tkreg))
        say(f"  compiled MLP {tokens} tokens: {rows[-1]}")
    return rows


def _mlp_row(op: str, tokens: int, weights: list[Any], with_torch: Callable[..., Any], with_tkreg: Callable[..., Any]) -> dict:
    """Both blocks under torch.compile (the default mode, and mode="reduce-overhead", which
    replays CUDA graphs as small-batch inference runs), timed interleaved with their eager
    calls; and whether Inductor generated the same code for both (``same_code``): where every
    product of the block traces as torch's own, the two compiled graphs should be one."""
    import torch
    from torch._inductor.utils import run_and_get_code

    h, i = MLP["hidden"], MLP["intermediate"]
    x = torch.randn(tokens, h, device="cuda", dtype=torch.bfloat16)
    row: dict[str, Any] = {"check": "compiled_mlp", "op": op, "tokens": tokens, "hidden": h, "intermediate": i}
    try:
        with_tkreg(x, *weights)  # tunes the three shapes eagerly, as a first eager call would
        torch._dynamo.reset()
        for w in weights:  # a model's weights stay put: CUDA graphs then read them where they are, uncopied
            torch._dynamo.mark_static_address(w, guard=False)
        ours = torch.compile(with_tkreg, fullgraph=True)
        theirs = torch.compile(with_torch, fullgraph=True)
        got, ours_code = run_and_get_code(ours, x, *weights)
        want, theirs_code = run_and_get_code(theirs, x, *weights)
        row["max_abs_diff"] = float((got.float() - want.float()).abs().max())
        row["same_code"] = bool(ours_code) and _wrapper_calls(ours_code) == _wrapper_calls(theirs_code)
        ours_graphs = torch.compile(with_tkreg, fullgraph=True, mode="reduce-overhead")
        theirs_graphs = torch.compile(with_torch, fullgraph=True, mode="reduce-overhead")
        for _ in range(3):  # CUDA graph trees warm up, record, then replay
            ours_graphs(x, *weights), theirs_graphs(x, *weights)
        row.update(_wall_us({"tkreg_us": lambda: ours(x, *weights), "torch_compile_us": lambda: theirs(x, *weights),
                             "tkreg_graphs_us": lambda: ours_graphs(x, *weights),
                             "torch_graphs_us": lambda: theirs_graphs(x, *weights),
                             "eager_tkreg_us": lambda: with_tkreg(x, *weights),
                             "eager_torch_us": lambda: with_torch(x, *weights)},
                            {"ratio": ("torch_compile_us", "tkreg_us"),
                             "graphs_ratio": ("torch_graphs_us", "tkreg_graphs_us")}))  # fmt: skip

        hidden = torch.empty(tokens, i, device="cuda", dtype=torch.bfloat16)
        products = {"x @ gate.t()": (x, weights[0].t()), "x @ up.t()": (x, weights[1].t()),
                    "h @ down.t()": (hidden, weights[2].t())}
        row["decisions"] = _decisions(op, products)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    return row


def _wrapper_calls(sources: Sequence[str]) -> list[str]:
    """What each generated module's ``call`` runs: its lines from ``def call(`` on, up to the
    module's next top-level statement, without comments (they name source lines)."""
    bodies = []
    for source in sources:
        lines = source.splitlines()
        start = next((n for n, line in enumerate(lines) if line.lstrip().startswith("def call(")), None)
        if start is None:
            continue
        body = [lines[start]]
        for line in lines[start + 1 :]:
            if line and not line[0].isspace():
                break
            if line.strip() and not line.strip().startswith("#"):
                body.append(line.rstrip())
        bodies.append("\n".join(body))
    return bodies


def _decisions(op: str, products: dict[str, tuple[Any, Any]]) -> dict[str, str]:
    """What tkreg.ops does for each product and why: the first line of its explanation, which
    names every candidate's time."""
    from ... import ops

    return {what: ops.explain(op, a, b).splitlines()[0][:2000] for what, (a, b) in products.items()}


def training_step(mm: Callable[..., Any], op: str, tokens: int, autocast: bool = False) -> list[dict[str, Any]]:
    """The step's time at ``tokens`` (the rows of x); what the forward's two products run, and
    what tkreg.ops would run for the backward formula's four (the input's gradient d_out @ W and
    the weight's x.t() @ d_out), which it calls where a kernel ran the forward (where the peer
    did, torch's autograd runs torch's backward). With ``autocast``, as mixed-precision training
    runs it: float32 weights and input, the forward under torch.autocast(bfloat16), which casts
    them for each product."""
    import contextlib

    import torch
    import torch.nn.functional as F

    t, h, inner = tokens, TRAIN["hidden"], TRAIN["inner"]
    stored = torch.float32 if autocast else torch.bfloat16
    x = torch.randn(t, h, device="cuda", dtype=stored)
    w1 = (torch.randn(inner, h, device="cuda", dtype=stored) / math.sqrt(h)).requires_grad_()
    w2 = (torch.randn(h, inner, device="cuda", dtype=stored) / math.sqrt(inner)).requires_grad_()

    def step(linear: Callable[[Any, Any], Any]) -> None:
        w1.grad = w2.grad = None
        with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            out = linear(F.gelu(linear(x, w1.t())), w2.t())
        out.float().pow(2).mean().backward()

    row: dict[str, Any] = {"check": "training", "op": op, "tokens": t, "hidden": h, "inner": inner}
    if autocast:
        row["autocast"] = "bfloat16"
    try:
        step(mm)  # tunes the forward and backward shapes
        step(lambda a, b: a @ b)
        grads_torch = (w1.grad.clone(), w2.grad.clone())
        step(mm)
        row["grad_max_rel_diff"] = max(float((g.float() - r.float()).abs().max() / r.float().abs().max())
                                       for g, r in zip((w1.grad, w2.grad), grads_torch))  # fmt: skip
        row.update(_wall_us({"tkreg_us": lambda: step(mm), "torch_us": lambda: step(lambda a, b: a @ b)},
                            {"ratio": ("torch_us", "tkreg_us")}))  # fmt: skip
        with torch.autocast("cuda", dtype=torch.bfloat16) if autocast else contextlib.nullcontext():
            h = F.gelu(x @ w1.t()).detach()
            grad_out, grad_h = torch.empty(t, w2.shape[0], device="cuda", dtype=h.dtype), torch.empty_like(h)
            products = {"x @ w1.t()": (x, w1.t()), "h @ w2.t()": (h, w2.t()), "d_out @ w2": (grad_out, w2.detach()),
                        "h.t() @ d_out": (h.t(), grad_out), "d_h @ w1": (grad_h, w1.detach()), "x.t() @ d_h": (x.t(), grad_h)}
            row["decisions"] = _decisions(op, products)
    except Exception as e:
        row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
    say(f"  training step, {t} tokens{' under autocast' if autocast else ''}: {row}")
    return [row]


def row_training(registry: Registry, op: Op) -> list[dict[str, Any]]:
    """A forward and backward of a row op (inputs from its make_inputs, its gradients) through
    tkreg.ops against the same through its peer, with torch's autograd, at model sizes."""
    dtype = "bfloat16" if "bfloat16" in op.bench_dtypes else op.bench_dtypes[0]
    rows = []
    for m, n in ROW_TRAINING:
        sig = Signature.of(op.name, {"M": m, "N": n}, dtype)
        row: dict[str, Any] = {"check": "row_training", "op": op.name, "shape": sig.shape, "dtype": dtype}
        try:
            row.update(_row_step(registry, op, sig))
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        say(f"  {op.name} training {row['shape']}: {row}")
    return rows


def _row_step(registry: Registry, op: Op, sig: Signature) -> dict[str, Any]:
    import torch

    from ... import ops
    from ...ops.forms import as_tuple

    call, peer = ops.get(op.name), refs.resolve(op.peer)
    inputs = tuple(t if t is None else t.requires_grad_(name in op.grads)
                   for name, t in zip(op.inputs, make_inputs(registry, sig, seed=3)))  # fmt: skip
    leaves = [t for t in inputs if t is not None and t.requires_grad]
    grad = torch.randn_like(as_tuple(call(*inputs))[0])

    def step(forward: Callable[[], Any]) -> Callable[[], None]:
        def run() -> None:
            for t in leaves:
                t.grad = None
            as_tuple(forward())[0].backward(grad)

        return run

    ours = step(lambda: call(*inputs))
    theirs = step(lambda: peer(*inputs, out=None, **op.defaults))
    ours()
    got = [t.grad.clone() for t in leaves]
    theirs()
    row: dict[str, Any] = {"grad_max_abs_diff": max(float((g.float() - t.grad.float()).abs().max()) for g, t in zip(got, leaves))}
    row.update(_wall_us({"tkreg_us": ours, "torch_us": theirs}, {"ratio": ("torch_us", "tkreg_us")}))
    row["decision"] = ops.explain(op.name, *[t if t is None else t.detach() for t in inputs])  # whole: training ends it
    return row


def batched(mm: Callable[..., Any], op: str) -> list[dict[str, Any]]:
    import torch

    from ... import ops

    rows = []
    for shape in ((4, 128, 256, 64), (8, 33, 1000, 72)):
        b, m, k, n = shape
        a = torch.randn(b, m, k, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(b, k, n, device="cuda", dtype=torch.bfloat16)
        row: dict[str, Any] = {"check": "batched", "op": op, "shape": "x".join(map(str, shape))}
        try:
            got = mm(a, w)
            want = torch.bmm(a.float(), w.float())
            row["max_abs_err"] = float((got.float() - want).abs().max())
            row["decision"] = ops.explain(op, a, w)
        except Exception as e:
            row["error"] = f"{type(e).__name__}: {str(e)[:300]}"
        rows.append(row)
        say(f"  batched {row['shape']}: {row}")
    return rows

