"""The ``matmul`` op's contract: C = A @ B (+ bias) for A (M, K), B (K, N), an optional bias (N,),
fp16/bf16 inputs, accumulation in fp32, C in the input dtype. B is a row-major (K, N) tensor or the
transposed view of a row-major (N, K) weight, so ``matmul(x, W.t(), b)`` is ``F.linear(x, W, b)``.
Everything here runs on torch alone (no triton)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from tkreg import Cost, Tolerance
from tkreg.core.tolerances import UNIT_ROUNDOFF

# Layouts make_inputs understands (Case.variant):
#   ""           contiguous A and B
#   "strided"    A and B are column windows of wider row-major buffers: row strides larger than the
#                row, base 16 bytes into the buffer; still TMA-legal (strides multiples of 16 bytes)
#   "transposed" A and B are transposed views of row-major buffers (column-major, last stride != 1):
#                only kernels with arbitrary strides take them, TMA kernels must refuse (A's layout)
#   "weight"     A contiguous, B = W.t() for a contiguous (N, K) W: x @ W.t() with an nn.Linear weight
#   "weight-strided"  as "weight", with W a column window of a wider buffer (padded rows, offset base)
#   "batched"    A (Bt, M, K) and B (Bt, K, N), contiguous: Bt products (the case's dim "B")
#   "batched-weight"  A (Bt, M, K), B = W.transpose(1, 2) for a contiguous (Bt, N, K) W
# Each with "-bias" (e.g. "weight-bias", or "bias" alone for contiguous A and B) also passes a
# bias (N,) of the inputs' dtype, as nn.Linear(bias=True) does; without, the bias is None.
BATCHED = ("batched", "batched-weight")
LAYOUT_VARIANTS = ("", "strided", "transposed", "weight", "weight-strided", *BATCHED)
BIAS = "bias"
VARIANTS = (*LAYOUT_VARIANTS, *(f"{v}-{BIAS}" if v else BIAS for v in LAYOUT_VARIANTS))
STRIDED_PAD = 8  # extra elements per row in the "strided" layout; with the row rounded up to 8, 16-byte strides
STRIDED_OFFSET = 8  # first column of the window: 16 bytes for 2-byte dtypes, keeps the base TMA-aligned

# Tolerance, from an error argument (the harness compares with the float64 result rounded once to
# the output dtype d, ref = round_d(c)):
#   The kernel computes r = sum of K products in fp32, then out = round_d(r). Products of fp16 or
#   bf16 numbers are exact in fp32 (11 + 11 and 8 + 8 significand bits <= 24), so r - c = e is the
#   fp32 summation error alone. Then |out - ref| <= |round_d(r) - r| + |e| + |c - round_d(c)|
#   <= u_d |r| + |e| + u_d |c| ~= 2 u_d |ref| + |e|: one unit in the last place of the output (a
#   last-bit flip when r and c straddle a rounding boundary) plus the accumulation error.
#   rtol = 2 u_d covers the flip. atol covers |e|: by the probabilistic bound of Higham & Mary (SIAM
#   J. Sci. Comput. 41(5), 2019, Thm 3.1), |e| <= lambda sqrt(K) u_32 sum_i |a_i b_i| with
#   probability >= 1 - 2K exp(-lambda^2 / 2); lambda = 8 makes that 1 - 4e-10 per element at
#   K = 16384. For make_inputs' standard normal a and b, E|a_i b_i| = E|a| E|b| = 2/pi, so
#   sum_i |a_i b_i| ~= (2/pi) K and |e| <= lambda u_32 (2/pi) K^1.5: the table's atol is
#   lambda u_32 (2/pi) and tolerance_scale gives K^1.5. This also covers tensor-core accumulators
#   that align or truncate per k-step (biased error ~ u_32 * (K / k_step) * max partial sum, about
#   a tenth of the bound at K = 2000). It stays far below what a real bug leaves: a wrong tile or a
#   dropped K tail changes elements by O(1) (one product) to O(sqrt(K)); at K = 2000 atol = 0.027.
#   A bias adds one fp32 addition to r before the rounding (error u_32 |r + bias|, far inside rtol),
#   so the same table holds; a dropped bias changes elements by |bias| ~ 1.
ERROR_BOUND_LAMBDA = 8.0
MEAN_ABS_NORMAL_PRODUCT = 2.0 / math.pi
DTYPES = ("float16", "bfloat16")
TOLERANCES: dict[str, Tolerance] = {
    d: Tolerance(ERROR_BOUND_LAMBDA * UNIT_ROUNDOFF["float32"] * MEAN_ABS_NORMAL_PRODUCT, 2 * UNIT_ROUNDOFF[d]) for d in DTYPES
}


def tolerance_scale(dims: Mapping[str, int]) -> float:
    """K^1.5: sqrt(K) from the probabilistic bound times K from sum |a_i b_i| (see above)."""
    return float(dims["K"]) ** 1.5


def reference(a: Any, b: Any, bias: Any = None) -> Any:
    return a @ b if bias is None else a @ b + bias


def split_variant(variant: str) -> tuple[str, bool]:
    """(B's layout variant, whether a bias is passed) of a case variant."""
    if variant == BIAS:
        return "", True
    if variant.endswith(f"-{BIAS}"):
        return variant[: -len(BIAS) - 1], True
    return variant, False


def make_inputs(case: Any, dtype: Any, generator: Any, device: Any) -> tuple[Any, Any, Any]:
    import torch

    def randn(*shape: int) -> Any:
        return torch.randn(shape, generator=generator, device=device, dtype=torch.float32).to(dtype)

    layout, with_bias = split_variant(case.variant)
    a, b = _operands(randn, layout, case)
    return a, b, randn(case["N"]) if with_bias else None


def _operands(randn: Any, layout: str, case: Any) -> tuple[Any, Any]:
    M, N, K = case["M"], case["N"], case["K"]
    if layout == "":
        return randn(M, K), randn(K, N)
    if layout == "strided":
        return _window(randn, M, K), _window(randn, K, N)
    if layout == "transposed":
        return randn(K, M).t(), randn(N, K).t()
    if layout == "weight":
        return randn(M, K), randn(N, K).t()
    if layout == "weight-strided":
        return randn(M, K), _window(randn, N, K).t()
    if layout == "batched":
        return randn(case["B"], M, K), randn(case["B"], K, N)
    if layout == "batched-weight":
        return randn(case["B"], M, K), randn(case["B"], N, K).transpose(1, 2)
    raise ValueError(f"matmul: unknown case variant {case.variant!r}; known: {', '.join(repr(v) for v in VARIANTS)}")


def _window(randn: Any, rows: int, cols: int) -> Any:
    width = STRIDED_OFFSET + -(-cols // STRIDED_PAD) * STRIDED_PAD + STRIDED_PAD
    return randn(rows, width)[:, STRIDED_OFFSET : STRIDED_OFFSET + cols]


def make_output(a: Any, b: Any, bias: Any = None) -> Any:
    import torch

    return torch.empty((*a.shape[:-1], b.shape[-1]), dtype=a.dtype, device=a.device)  # (M, N), or (Bt, M, N)


def cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    M, N, K, batches = dims["M"], dims["N"], dims["K"], dims.get("B", 1)
    return Cost(bytes=batches * (M * K + K * N + M * N) * itemsize, flops=2 * batches * M * N * K)


def peer(a: Any, b: Any, bias: Any = None, *, out: Any = None) -> Any:
    """torch.matmul without a bias (what ``x @ w`` calls); with one, cuBLAS with the bias added in
    its epilogue, as ``F.linear(x, W, bias)`` runs it: torch.addmm on B as given (A's leading dims
    merged into rows), which costs the host less than F.linear's own call (it makes no transposed
    view of W); for a batch of B the product then the bias (baddbmm). Into ``out`` where given,
    with no copy. A bias of another shape than (N,) gets F.linear's broadcasting."""
    import torch

    if bias is None:
        return torch.matmul(a, b, out=out)
    if b.dim() == 3:
        return torch.baddbmm(bias, a, b, out=out)
    if bias.dim() != 1 or (out is not None and not out.is_contiguous()):
        got = torch.nn.functional.linear(a, b.mT, bias)
        return got if out is None else out.copy_(got)
    if a.dim() == 2:
        return torch.addmm(bias, a, b, out=out)
    rows = torch.addmm(bias, a.reshape(-1, a.shape[-1]), b, out=None if out is None else out.view(-1, out.shape[-1]))
    return rows.view(*a.shape[:-1], b.shape[-1]) if out is None else out


def peer_direct(shapes: tuple[tuple[int, ...] | None, ...]) -> tuple[Any, tuple[int, ...]] | None:
    """The torch call :func:`peer` makes for inputs of these shapes, as (target, input order), so
    that a plan running the peer makes it with no frame of ``peer``'s own; None where ``peer``
    reshapes or broadcasts (a bias with A of more than two dims, or a bias not 1-D)."""
    import torch

    a, b, bias = shapes
    if bias is None:
        return torch.matmul, (0, 1)
    if len(bias) != 1:
        return None
    if len(b) == 3:
        return torch.baddbmm, (2, 0, 1)
    if len(a) == 2:
        return torch.addmm, (2, 0, 1)
    return None


def backward(inputs: Any, outputs: Any, grad_outputs: Any, needs_input_grad: Any = (True, True, True)) -> tuple[Any, Any, Any]:
    """C = A B (+ bias): dA = dC B^T and dB = A^T dC, each one more tkreg.ops.matmul (so they run
    on the registered kernels too), and dbias = dC summed over its rows, each only where a gradient
    is needed. With a 2-D B, A's and dC's leading dims merge into rows for dB; a batched B
    (B, K, N) gets one product per batch."""
    import tkreg.ops

    a, b, bias = inputs
    (grad,) = grad_outputs
    need_a, need_b, need_bias = needs_input_grad
    grad_bias = _bias_grad(grad, bias) if need_bias and bias is not None else None
    matmul = tkreg.ops.matmul
    if b.dim() == 3:
        return (matmul(grad, b.transpose(1, 2)) if need_a else None, matmul(a.transpose(1, 2), grad) if need_b else None,
                grad_bias)  # fmt: skip
    k, n = b.shape
    grad_a = matmul(grad, b.t()) if need_a else None
    if not need_b:
        return grad_a, None, grad_bias
    rows_a, rows_grad = a.reshape(-1, k), grad.reshape(-1, n)
    if b.stride(0) == 1 and b.stride(1) != 1:
        # B is the transposed view of a row-major (N, K) weight, as in x @ W.t(): compute dW = dC^T A
        # in W's own layout and hand back its transposed view, so the weight's gradient lands
        # without a transposing copy (a full strided pass over dW, as long as the product itself).
        return grad_a, matmul(rows_grad.t(), rows_a).t(), grad_bias
    return grad_a, matmul(rows_a.t(), rows_grad), grad_bias


def _bias_grad(grad: Any, bias: Any) -> Any:
    """dC summed over every dim the bias was broadcast along (torch's reductions of fp16/bf16
    accumulate in fp32), in the bias's dtype."""
    return grad.sum_to_size(bias.shape).to(bias.dtype)
