"""Input checks for matmul launchers, before any launch. Duck-typed (nothing here imports torch or
triton), so ``gluon_matmul_inputs_reasons`` can serve as a ``Requirements.inputs`` checker."""

from __future__ import annotations

from typing import Any, cast

from tkreg.launch.inputs import TMA_ALIGNMENT, check_output, device_reasons, fail_if, tensor_reasons, tma_reasons

from .layouts import b_tma_reasons
from .op import DTYPES


def operand_reasons(a: Any, b: Any) -> list[str]:
    """A and B are 2-D fp16/bf16 tensors of one dtype whose inner dimensions agree."""
    reasons = tensor_reasons(a, "a", rank=2, dtypes_allowed=DTYPES) + tensor_reasons(b, "b", rank=2, dtypes_allowed=DTYPES)
    if reasons:
        return reasons
    if a.dtype != b.dtype:
        reasons.append(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[1] != b.shape[0]:
        reasons.append(f"inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)} (need a (M, K), b (K, N))")
    return reasons


def bias_reasons(a: Any, b: Any, bias: Any) -> list[str]:
    """A bias is None, or a contiguous vector of N elements (B's last dim) of A's dtype, as
    ``nn.Linear`` keeps it. (torch also broadcasts other shapes; tkreg.ops gives those to the peer.)"""
    if bias is None:
        return []
    reasons = tensor_reasons(bias, "bias", rank=1, dtypes_allowed=DTYPES)
    if reasons:
        return reasons
    n = b.shape[-1]
    if bias.shape[0] != n:
        reasons.append(f"bias has {bias.shape[0]} elements; it must have N={n} (b's last dim)")
    if bias.dtype != a.dtype:
        reasons.append(f"bias must have a's dtype, got {bias.dtype} and {a.dtype}")
    if bias.stride(0) != 1 and bias.shape[0] > 1:
        reasons.append(f"bias must be contiguous, got stride {bias.stride(0)}")
    return reasons


MAX_BATCHES = 65535  # a grid's second axis: one batch per index


def matrix_inputs_reasons(a: Any, b: Any, bias: Any = None, *rest: Any) -> list[str]:
    """Requirements.inputs of kernels that take one product: 2-D A and B (see operand_reasons) and a
    bias (see bias_reasons)."""
    return operand_reasons(a, b) or bias_reasons(a, b, bias)


def batched_operand_reasons(a: Any, b: Any, bias: Any = None, *rest: Any) -> list[str]:
    """Requirements.inputs of batched kernels: A (Bt, M, K) and B (Bt, K, N), 3-D fp16/bf16 tensors of
    one dtype with as many batches, at most MAX_BATCHES, whose inner dimensions agree, and a bias
    (N,) for every batch (see bias_reasons)."""
    reasons = tensor_reasons(a, "a", rank=3, dtypes_allowed=DTYPES) + tensor_reasons(b, "b", rank=3, dtypes_allowed=DTYPES)
    if reasons:
        return reasons
    if a.dtype != b.dtype:
        reasons.append(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    if a.shape[0] != b.shape[0] or a.shape[2] != b.shape[1]:
        reasons.append(f"a is {tuple(a.shape)} and b is {tuple(b.shape)}: need a (Bt, M, K) and b (Bt, K, N)")
    elif a.shape[0] > MAX_BATCHES:
        reasons.append(f"{a.shape[0]} batches; at most {MAX_BATCHES} in one launch")
    return reasons or bias_reasons(a, b, bias)


def refused_bias(bias: Any) -> list[str]:
    """The reason a kernel without a bias epilogue gives for a bias (none for None)."""
    return [] if bias is None else ["bias: this kernel has no bias epilogue (it takes bias=None only)"]


def gluon_matmul_inputs_reasons(a: Any, b: Any, bias: Any = None, *rest: Any) -> list[str]:
    """Requirements.inputs for TMA matmuls without a bias epilogue: bias None, then
    :func:`gluon_operand_reasons`."""
    return refused_bias(bias) or gluon_operand_reasons(a, b, *rest)


def gluon_bias_matmul_inputs_reasons(a: Any, b: Any, bias: Any = None, *rest: Any) -> list[str]:
    """Requirements.inputs for TMA matmuls with a bias epilogue: :func:`gluon_operand_reasons`,
    then a bias that is None or passes :func:`bias_reasons`."""
    return gluon_operand_reasons(a, b, *rest) or bias_reasons(a, b, bias)


def gluon_operand_reasons(a: Any, b: Any, *rest: Any) -> list[str]:
    """Operand checks, then TMA's layout rules (last stride 1, 16-byte aligned base and row stride:
    K and N multiples of 8 for 2-byte types) for A, and for B as a row-major (K, N) tensor or as the
    transpose of a row-major (N, K) weight (see :mod:`tkreg_matmul.layouts`). Extra tensors (e.g.
    an output) are checked for TMA too."""
    reasons = operand_reasons(a, b)
    if reasons:
        return reasons
    reasons = tma_reasons(a, "a") + b_tma_reasons(b)[1] + output_row_reasons(a, b)
    for i, t in enumerate(rest):
        reasons += tma_reasons(t, f"input {i + 3}")
    return reasons


def output_row_reasons(a: Any, b: Any) -> list[str]:
    """The (M, N) output the launcher allocates is stored through TMA too: its rows of N elements
    must be a multiple of 16 bytes, whatever B's own (possibly padded) stride is."""
    row_bytes = b.shape[1] * b.element_size()
    if row_bytes % TMA_ALIGNMENT:
        return [
            f"out: rows of N={b.shape[1]} elements are {row_bytes} bytes, not a multiple of {TMA_ALIGNMENT}; TMA stores need it"
        ]
    return []


def validate_gluon_matmul(a: Any, b: Any, out: Any = None) -> str:
    """Raise InputError unless the Gluon (TMA) matmuls can take a, b and out: 2-D, one dtype
    (fp16/bf16), K agreement, CUDA tensors, TMA alignment; a given out must be (M, N) of the dtype
    on the same device and TMA-legal. Returns B's layout ("kn" or "nk", see tkreg_matmul.layouts)."""
    fail_if(operand_reasons(a, b))
    named = [("a", a), ("b", b)] + ([("out", out)] if out is not None else [])
    fail_if(device_reasons(named, interpretable=False))
    layout, b_reasons = b_tma_reasons(b)
    reasons = tma_reasons(a, "a") + b_reasons + (output_row_reasons(a, b) if out is None else [])
    if out is not None:
        check_output(out, (a.shape[0], b.shape[1]), a.dtype, a.device)
        reasons += tma_reasons(out, "out")
    fail_if(reasons)
    # b_tma_reasons names a layout whenever it gives no reasons.
    return cast(str, layout)
