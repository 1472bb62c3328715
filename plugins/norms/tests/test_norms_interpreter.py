"""The kernels under Triton's CPU interpreter, on what the generated items do not reach: the block
boundaries of each plan, rows at the fused/looped limits, a decode row, eps at 0 and 1, mixed
dtypes, broadcast rows, strided outputs and gradients, rows with a large mean, the fast path,
the determinism of the weight-gradient reduction (same inputs, same bits), and an absent (None)
weight or bias in every plan, against torch's functions given the same None.

The interpreter must be on before triton builds the kernels, so the checks run in one fresh
process (this file run as a script) that prints one JSON object: each check's failure, or null.
Each check returns a list of problems (empty: it passed)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import tkreg
from tkreg.core.loading import build_registry
from tkreg.core.specs import case
from tkreg.testing.markers import runs_the_interpreter

CHECKS: dict[str, Callable[[], list[str]]] = {}
SMALL_BLOCKS = {"BLOCK": 256, "ROWS": 2, "num_warps": 2}


def check(fn: Callable[[], list[str]]) -> Callable[[], list[str]]:
    CHECKS[fn.__name__] = fn
    return fn


def _registry() -> tkreg.Registry:
    return build_registry(env={"TKREG_PLUGINS": "norms"})


def _run(kernels: tuple[str, ...], cases: list[Any], dtypes: tuple[str, ...], configs: tuple[dict[str, Any], ...],
         params: tuple[dict[str, Any], ...] = ({},)) -> list[str]:
    """run_check (the generated items' check) over the cross product; the failures' reports."""
    from tkreg.testing.harness import run_check

    registry, problems = _registry(), []
    for name in kernels:
        kernel = registry.kernel(name)
        for c in cases:
            for dtype in dtypes:
                for config in configs:
                    backward = {"programs": 3} if kernel.backward and config else {}
                    for p in params:
                        result = run_check(registry, kernel, c, dtype, {**config, **backward}, seed=7, device="cpu", params=p)
                        if not result.ok or result.rejected:
                            problems.append(result.report() or f"{result.context}: rejected {result.rejected}")
    return problems


ALL = ("rms_norm_triton", "rms_norm_bwd_triton", "layer_norm_triton", "layer_norm_bwd_triton")


@check
def block_boundaries() -> list[str]:
    # 256-element blocks: rows one short of, at and one past one and two blocks
    cases = [case(M=3, N=n) for n in (255, 256, 257, 512, 513)]
    return _run(ALL, cases, ("float32", "bfloat16"), (SMALL_BLOCKS, {}))


@check
def fused_and_looped_limits() -> list[str]:
    # the forward keeps rows up to 16384 whole, the backward up to 8192
    forward = _run(("rms_norm_triton", "layer_norm_triton"), [case(M=2, N=16384), case(M=2, N=16385)],
                   ("float32", "bfloat16"), ({},))
    backward = _run(("rms_norm_bwd_triton", "layer_norm_bwd_triton"), [case(M=3, N=8192), case(M=3, N=8193)],
                    ("float32", "float16"), ({},))
    return forward + backward


@check
def decode_rows() -> list[str]:
    return _run(ALL, [case(M=1, N=4096), case(M=1, N=65536, variant="offset")], ("bfloat16",), ({},))


@check
def eps_zero_and_one() -> list[str]:
    return _run(ALL, [case(M=5, N=300)], ("float32", "bfloat16"), ({}, SMALL_BLOCKS), ({"eps": 0.0}, {"eps": 1.0}))


def _launch(layer: bool, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, eps: float, **config: Any
            ) -> tuple[torch.Tensor, ...]:
    from tkreg_norms import launch

    m = x.shape[0]
    stats = tuple(torch.full((m, 1), float("nan")) for _ in range(2 if layer else 1))
    out = (torch.full(x.shape, float("nan"), dtype=x.dtype), *stats)
    if layer:
        return launch.layer_norm_forward(x, w, b, out=out, eps=eps, **config)
    return launch.rms_norm_forward(x, w, out=out, eps=eps, **config)


def _reference(layer: bool, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, eps: float) -> tuple[torch.Tensor, ...]:
    from tkreg_norms import op

    if layer:
        return op.layer_norm_reference(x.double(), w.double(), b.double(), eps=eps)  # type: ignore[union-attr]
    return op.rms_norm_reference(x.double(), w.double(), eps=eps)


def _compare(what: str, got: tuple[torch.Tensor, ...], want: tuple[torch.Tensor, ...], layer: bool) -> list[str]:
    """The outputs against the float64 reference, with the op's tolerances (bf16 y)."""
    from tkreg_norms import plugin

    from tkreg.testing.checking import compare

    op = plugin.LAYER_NORM if layer else plugin.RMS_NORM
    problems = []
    for output, g, w in zip(op.outputs, got, want):
        tol = op.tolerance(dtype_name(g) if output.dtype is None else "float32", case(M=1, N=1), output)
        result = compare(g, w.to(g.dtype).double(), tol)
        if not result.ok:
            problems.append(f"{what}: {output.name}: {result.report()}")
    return problems


def dtype_name(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


@check
def mixed_dtypes() -> list[str]:
    # bf16 activations with fp32 weight and bias (mixed-precision training keeps them so)
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 300, generator=g).bfloat16()
    w, b = torch.randn(300, generator=g), torch.randn(300, generator=g)
    problems = []
    for layer in (False, True):
        for config in ({}, SMALL_BLOCKS):
            got = _launch(layer, x, w, b if layer else None, 1e-5, **config)
            problems += _compare(f"layer={layer} {config}", got, _reference(layer, x, w, b if layer else None, 1e-5), layer)
    return problems


@check
def broadcast_rows() -> list[str]:
    # x of one row repeated (row stride 0): every output row is the same
    row = torch.randn(1, 1000, generator=torch.Generator().manual_seed(4))
    x = row.expand(9, 1000)
    w, b = torch.randn(1000), torch.randn(1000)
    problems = []
    for layer in (False, True):
        for config in ({}, SMALL_BLOCKS):
            got = _launch(layer, x, w, b if layer else None, 1e-6, **config)
            problems += _compare(f"layer={layer} {config}", got, _reference(layer, x, w, b if layer else None, 1e-6), layer)
            if not torch.equal(got[0], got[0][:1].expand(9, 1000)):
                problems.append(f"layer={layer} {config}: rows of one input differ")
    return problems


@check
def large_mean_rows() -> list[str]:
    """Rows with mean 1000 and unit spread: the variance must come from deviations (fused: the
    row centred in registers; looped: per-chunk deviations merged), not from E[x^2] - mean^2,
    which cancels to a 6% error here. rstd stays within 1e-4 (a tight fp32 sum gives ~1e-6)."""
    from tkreg_norms import op

    problems = []
    g = torch.Generator().manual_seed(5)
    for n, config in ((1000, {}), (65537, {}), (1000, SMALL_BLOCKS)):
        x = torch.randn(3, n, generator=g) + 1000
        w, b = torch.ones(n), torch.zeros(n)
        _, mean, rstd = _launch(True, x, w, b, 1e-5, **config)
        _, want_mean, want_rstd = op.layer_norm_reference(x.double(), w.double(), b.double(), eps=1e-5)
        err = float(((rstd.double() - want_rstd) / want_rstd).abs().max())
        if err > 1e-4:
            problems.append(f"N={n} {config}: rstd off by {err:.2g} relative")
        if float(((mean.double() - want_mean) / want_mean).abs().max()) > 1e-6:
            problems.append(f"N={n} {config}: mean off")
    return problems


def _backward(layer: bool, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, dy: torch.Tensor,
              out: tuple[torch.Tensor, ...], **config: Any) -> tuple[torch.Tensor, ...]:
    from tkreg_norms import launch, op

    if layer:
        _, mean, rstd = op.layer_norm_reference(x.double(), w.double(), b.double(), eps=1e-5)  # type: ignore[union-attr]
        return launch.layer_norm_backward(x, w, b, None, mean.float(), rstd.float(), dy, out=out, eps=1e-5, **config)
    _, rstd = op.rms_norm_reference(x.double(), w.double(), eps=1e-5)
    return launch.rms_norm_backward(x, w, None, rstd.float(), dy, out=out, eps=1e-5, **config)


def _grads(layer: bool, x: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None, dy: torch.Tensor) -> tuple[torch.Tensor, ...]:
    from tkreg_norms import op

    leaves = [t.double().requires_grad_() for t in ((x, w, b) if layer else (x, w))]
    y = (op.layer_norm_reference if layer else op.rms_norm_reference)(*leaves, eps=1e-5)[0]
    return torch.autograd.grad(y, leaves, dy.double())


def _poisoned(*tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(t.fill_(float("nan")) for t in tensors)


@check
def strided_outputs_and_gradients() -> list[str]:
    """y and dx written into rows of a wider buffer, dy read from one: padding left alone."""
    from tkreg_norms import launch, plugin

    from tkreg.testing.checking import compare

    problems = []
    g = torch.Generator().manual_seed(6)
    for layer in (False, True):
        for config in ({}, SMALL_BLOCKS):
            x, w, b = torch.randn(5, 300, generator=g), torch.randn(300, generator=g), torch.randn(300, generator=g)
            y_buf = torch.zeros(5, 310)
            out = (y_buf[:, 3:303], *(torch.empty(5, 1) for _ in range(2 if layer else 1)))
            if layer:
                launch.layer_norm_forward(x, w, b, out=out, eps=1e-5, **config)
            else:
                launch.rms_norm_forward(x, w, out=out, eps=1e-5, **config)
            problems += _compare(f"layer={layer} {config}", out, _reference(layer, x, w, b if layer else None, 1e-5), layer)
            if torch.count_nonzero(y_buf[:, :3]) or torch.count_nonzero(y_buf[:, 303:]):
                problems.append(f"layer={layer} {config}: wrote outside y's columns")
            dy = torch.randn(5, 320, generator=g)[:, 10:310]
            dx_buf = torch.zeros(5, 301)
            grads = _poisoned(torch.empty(300), *((torch.empty(300),) if layer else ()))
            out = (dx_buf[:, :300], *grads)
            backward_config = {**config, "programs": 2} if config else {}
            _backward(layer, x, w, b if layer else None, dy, out, **backward_config)
            want_grads = _grads(layer, x, w, b if layer else None, dy)
            tol = plugin.RMS_NORM.grad_tolerance("float32", case(M=1, N=1))
            for name, got, expected in zip(("dx", "dw", "db"), out, want_grads):
                result = compare(got, expected.float().double(), tol)
                if not result.ok:
                    problems.append(f"layer={layer} {config} {name}: {result.report()}")
            if torch.count_nonzero(dx_buf[:, 300:]):
                problems.append(f"layer={layer} {config}: wrote outside dx's columns")
    return problems


@check
def weight_gradient_is_deterministic() -> list[str]:
    """Two runs on the same inputs give the same bits, for every plan: one program, partial
    sums over programs in registers (fused), partial sums read and written back (looped)."""
    problems = []
    g = torch.Generator().manual_seed(8)
    for layer in (False, True):
        for m, n, config in ((37, 1000, {}), (37, 1000, {**SMALL_BLOCKS, "programs": 5}), (3, 40, {}), (6, 700, SMALL_BLOCKS)):
            for dtype in (torch.float32, torch.bfloat16):
                x, dy = torch.randn(m, n, generator=g).to(dtype), torch.randn(m, n, generator=g).to(dtype)
                w, b = torch.randn(n, generator=g).to(dtype), torch.randn(n, generator=g).to(dtype)
                runs = []
                for _ in range(2):
                    out = _poisoned(torch.empty(m, n, dtype=dtype), torch.empty(n, dtype=dtype),
                                    *((torch.empty(n, dtype=dtype),) if layer else ()))
                    runs.append(_backward(layer, x, w, b if layer else None, dy, out, **config))
                for name, first, second in zip(("dx", "dw", "db"), *runs):
                    if not torch.equal(first.view(torch.int16 if dtype == torch.bfloat16 else torch.int32),
                                       second.view(torch.int16 if dtype == torch.bfloat16 else torch.int32)):
                        problems.append(f"layer={layer} {m}x{n} {config} {dtype}: {name} differs between two runs")
    return problems


@check
def fast_path_gives_the_same_bits() -> list[str]:
    """With the fast checks taking CPU tensors (as they take CUDA ones on a GPU), the first call
    of a row width plans it (full checks), later calls skip the checks; outputs are the same bits."""
    full_checks, restore = _fast_checks_counted()
    problems = []
    g = torch.Generator().manual_seed(9)
    for layer in (False, True):
        for n in (300, 16385):
            x = torch.randn(4, n, generator=g).bfloat16()
            w = torch.nn.Parameter(torch.randn(n, generator=g).bfloat16())
            b = torch.randn(n, generator=g).bfloat16()
            before = len(full_checks)
            first = _launch(layer, x, w, b, 1e-5)
            second = _launch(layer, x, w, b, 1e-5)
            if len(full_checks) - before != 1:
                problems.append(f"layer={layer} N={n}: {len(full_checks) - before} full checks for two calls; expected 1")
            for a, c in zip(first, second):
                if not torch.equal(a, c):
                    problems.append(f"layer={layer} N={n}: the fast path's output differs")
    restore()
    return problems


def _fast_checks_counted() -> tuple[list[int], Any]:
    """The fast checks made to take CPU tensors, the forward's plans forgotten (the first call of
    a width must plan it) and its full checks counted: (the count, one per full check; a function
    that puts everything back)."""
    from tkreg_norms import checks, launch

    from tkreg.launch import inputs as launch_inputs

    launch_inputs.FAST_DEVICE_TYPE = "cpu"
    launch._FAST_FORWARD.clear()
    full_checks: list[int] = []
    original = checks.forward_reasons

    def counted(*args: Any, **kwargs: Any) -> list[str]:
        full_checks.append(1)
        return original(*args, **kwargs)

    def restore() -> None:
        checks.forward_reasons = original
        launch_inputs.FAST_DEVICE_TYPE = "cuda"

    checks.forward_reasons = counted
    return full_checks, restore


# -- absent weight and bias (None: nn.RMSNorm(d, elementwise_affine=False), nn.LayerNorm(d,
# bias=False), nn.LayerNorm(d, elementwise_affine=False)), checked against torch's own functions
# in float64 with the same None, not against the op's reference.

# Odd widths: fused narrow rows, a width no power of two, rows over several program steps, the
# looped backward (8193) and the looped forward (16385); with SMALL_BLOCKS every width from 257
# loops in 256-element chunks.
ABSENT_SHAPES = ((3, 7), (5, 1000), (33, 100), (2, 8193), (2, 16385))
# (weight, bias) present, per op: rms_norm has one optional input, layer_norm two
ABSENT_VECTORS = {False: ((False, False),), True: ((True, False), (False, True), (False, False))}


def _maybe(present: bool, t: torch.Tensor) -> torch.Tensor | None:
    return t if present else None


def _torch64(layer: bool, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None, eps: float) -> torch.Tensor:
    """torch's functional norm in float64, on float64 copies (requires_grad kept)."""
    if layer:
        return F.layer_norm(x, (x.shape[-1],), w, b, eps)
    return F.rms_norm(x, (x.shape[-1],), w, eps)


def _stats64(layer: bool, x: torch.Tensor, eps: float) -> tuple[torch.Tensor, ...]:
    """mean and rstd (layer_norm) or rstd, in float64, as (M, 1)."""
    x = x.double()
    if layer:
        var, mean = torch.var_mean(x, dim=-1, unbiased=False, keepdim=True)
        return mean, torch.rsqrt(var + eps)
    return (torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps),)


def _wide(t: torch.Tensor | None) -> torch.Tensor | None:
    return None if t is None else t.detach().double().requires_grad_()


def _absent_forward(tag: str, layer: bool, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None,
                    config: dict[str, Any]) -> list[str]:
    got = _launch(layer, x, w, b, 1e-5, **config)  # outputs poisoned with NaN first
    want = (_torch64(layer, x.double(), _wide(w), _wide(b), 1e-5).detach(), *_stats64(layer, x, 1e-5))
    return _compare(tag, got, want, layer)


def _absent_backward(tag: str, layer: bool, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None,
                     dy: torch.Tensor, config: dict[str, Any]) -> list[str]:
    """dx (and dw, db where present) against float64 autograd of torch's function; the gradient
    slots of absent inputs are None and stay None."""
    from tkreg_norms import launch, plugin

    from tkreg.testing.checking import compare

    m, n = x.shape
    stats = tuple(s.float() for s in _stats64(layer, x, 1e-5))
    grads = _poisoned(torch.empty(m, n, dtype=x.dtype), *(torch.empty(n, dtype=v.dtype) for v in (w, b) if v is not None))
    slots = iter(grads)
    out = tuple(next(slots) if v is not None or i == 0 else None for i, v in enumerate((x, w, b) if layer else (x, w)))
    if layer:
        returned = launch.layer_norm_backward(x, w, b, None, *stats, dy, out=out, eps=1e-5, **config)
    else:
        returned = launch.rms_norm_backward(x, w, None, *stats, dy, out=out, eps=1e-5, **config)
    problems = [] if returned is out else [f"{tag}: the backward did not return its out"]
    leaves = [_wide(t) for t in (x, w, b)]  # rms_norm's b is None
    y = _torch64(layer, *leaves, 1e-5)
    present = [(name, got, leaf) for name, got, leaf in zip(("dx", "dw", "db"), out, leaves) if leaf is not None]
    wants = torch.autograd.grad(y, [leaf for _, _, leaf in present], dy.double())
    tol = plugin.LAYER_NORM.grad_tolerance(dtype_name(x), case(M=m, N=n))
    for (name, got, _), want in zip(present, wants):
        if got is None:
            problems.append(f"{tag}: {name} is None")
            continue
        result = compare(got, want.to(got.dtype).double(), tol)
        if not result.ok:
            problems.append(f"{tag} {name}: {result.report()}")
    return problems


@check
def absent_weight_and_bias() -> list[str]:
    """Forward and backward launchers with the weight and/or bias None, every plan (fused and
    looped, one program and partial sums over several), fp32 and bf16."""
    problems = []
    g = torch.Generator().manual_seed(10)
    for layer, vectors in ABSENT_VECTORS.items():
        for (m, n), config, dtype, (weight, bias) in itertools.product(
                ABSENT_SHAPES, ({}, SMALL_BLOCKS), (torch.float32, torch.bfloat16), vectors):
            x, dy = torch.randn(m, n, generator=g).to(dtype), torch.randn(m, n, generator=g).to(dtype)
            w = _maybe(weight, torch.randn(n, generator=g).to(dtype))
            b = _maybe(bias and layer, torch.randn(n, generator=g).to(dtype))
            tag = f"layer={layer} {m}x{n} {dtype} weight={weight} bias={bias and layer} {config}"
            problems += _absent_forward(tag, layer, x, w, b, config)
            problems += _absent_backward(tag, layer, x, w, b, dy, {**config, "programs": 3} if config else {})
    return problems


@check
def absent_inputs_take_the_fast_path() -> list[str]:
    """With None for the weight or bias, the fast checks take the call as with tensors: the first
    call of an op's row width plans it (full checks), later ones skip them, with or without the
    vectors (the plan does not depend on them), with the same bits; the backward gives the same
    bits twice."""
    from tkreg_norms import launch

    full_checks, restore = _fast_checks_counted()
    problems = []
    g = torch.Generator().manual_seed(11)
    try:
        for layer, vectors in ABSENT_VECTORS.items():
            for n, (weight, bias) in itertools.product((300, 16385), vectors):
                x, dy = torch.randn(4, n, generator=g).bfloat16(), torch.randn(4, n, generator=g).bfloat16()
                w = _maybe(weight, torch.nn.Parameter(torch.randn(n, generator=g).bfloat16()))
                b = _maybe(bias and layer, torch.randn(n, generator=g).bfloat16())
                tag = f"layer={layer} N={n} weight={weight} bias={bias and layer}"
                before, planned = len(full_checks), (layer, n, torch.bfloat16) in launch._FAST_FORWARD
                first, second = _launch(layer, x, w, b, 1e-5), _launch(layer, x, w, b, 1e-5)
                if len(full_checks) - before != (0 if planned else 1):
                    problems.append(f"{tag}: {len(full_checks) - before} full checks for two calls; expected "
                                    f"{0 if planned else 1}")
                if not all(torch.equal(p, q) for p, q in zip(first, second)):
                    problems.append(f"{tag}: the fast path's output differs")
                if layer and weight:  # the same width with every vector present, on the same plan
                    full = _launch(layer, x, w, torch.zeros(n).bfloat16(), 1e-5)
                    if not torch.equal(full[0], first[0]):
                        problems.append(f"{tag}: a zero bias gives other values than none")
                runs = []
                for _ in range(2):
                    out = _poisoned(torch.empty(4, n).bfloat16(), *(torch.empty(n).bfloat16() for v in (w, b) if v is not None))
                    slots = iter(out)
                    grads = tuple(next(slots) if i == 0 or v is not None else None
                                  for i, v in enumerate((x, w, b) if layer else (x, w)))
                    runs.append(_backward_without(layer, x, w, b, first, dy, grads))
                if not all(torch.equal(p, q) for p, q in zip(*runs) if p is not None):
                    problems.append(f"{tag}: two backward calls differ")
    finally:
        restore()
    return problems


def _backward_without(layer: bool, x: torch.Tensor, w: torch.Tensor | None, b: torch.Tensor | None,
                      forward: tuple[torch.Tensor, ...], dy: torch.Tensor, out: tuple[Any, ...]) -> tuple[Any, ...]:
    from tkreg_norms import launch

    if layer:
        return launch.layer_norm_backward(x, w, b, forward[0], forward[1], forward[2], dy, out=out, eps=1e-5)
    return launch.rms_norm_backward(x, w, forward[0], forward[1], dy, out=out, eps=1e-5)


@pytest.fixture(scope="module")
def results() -> dict[str, list[str]]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, __file__], env=env, capture_output=True, text=True, timeout=900)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@runs_the_interpreter
@pytest.mark.parametrize("name", list(CHECKS))
def test_under_the_interpreter(results: dict[str, list[str]], name: str) -> None:
    assert name in results, f"{name} did not run"
    assert not results[name], "\n".join(results[name])


if __name__ == "__main__":
    import traceback

    outcome: dict[str, list[str]] = {}
    for name, fn in CHECKS.items():
        try:
            outcome[name] = fn()
        except Exception:
            outcome[name] = [traceback.format_exc()]
    print(json.dumps(outcome))
