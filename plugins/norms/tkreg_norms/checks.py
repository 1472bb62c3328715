"""What the norm kernels take, as reasons a person can read: the launchers raise them as one
tkreg.InputError before any launch, and the kernels' ``Requirements(inputs=...)`` give them to
lookup and tkreg.ops (which then call the peer instead). Duck-typed; imports no torch.

The kernels take 2-D x (M, N) with unit column stride and any row stride, a contiguous weight (and
bias) of N elements or None (absent, as Op.optional allows: ones, zeros), fp32/fp16/bf16 in any
mix, on one CUDA device (or the CPU under TRITON_INTERPRET=1). Outputs are written where the caller
says, so they must not overlap: rows of y and dx at least N apart, the statistics contiguous. The
gradient of an absent weight or bias is None, and only then.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tkreg.launch.inputs import device_reasons, is_tensor, tensor_reasons

DTYPES = ("float32", "float16", "bfloat16")
STATS_DTYPE = "float32"
# Column indices are int32 in the kernels, with a chunk's worth of headroom.
MAX_N = 2**31 - 2**20


def _dtype_name(t: Any) -> str:
    return str(t.dtype).removeprefix("torch.")


def rows_reasons(t: Any, name: str, shape: tuple[int, int] | None = None, dtype: str | None = None,
                 output: bool = False) -> list[str]:
    """A (M, N) tensor of rows: 2-D, a float dtype (or exactly ``dtype``), unit column stride;
    an output's rows must not overlap."""
    reasons = tensor_reasons(t, name, rank=2, dtypes_allowed=DTYPES)
    if reasons:
        return reasons
    if shape is not None and tuple(t.shape) != shape:
        reasons.append(f"{name} has shape {tuple(t.shape)}; expected {shape}")
    if dtype is not None and _dtype_name(t) != dtype:
        reasons.append(f"{name} has dtype {_dtype_name(t)}; expected {dtype}")
    if t.stride(1) != 1 and t.shape[1] > 1:
        reasons.append(f"{name} has column stride {t.stride(1)}; the kernels need 1 (rows contiguous, any row stride)")
    if output and t.shape[0] > 1 and t.stride(0) < t.shape[1]:
        reasons.append(f"{name} has row stride {t.stride(0)} < {t.shape[1]} columns: its rows overlap")
    if t.shape[1] > MAX_N:
        reasons.append(f"{name} has rows of {t.shape[1]} elements; at most {MAX_N} (int32 column indices)")
    return reasons


def vector_reasons(t: Any, name: str, n: int, dtype: str | None = None) -> list[str]:
    """A per-column vector (weight, bias, their gradients): 1-D, N elements, contiguous."""
    reasons = tensor_reasons(t, name, rank=1, dtypes_allowed=DTYPES)
    if reasons:
        return reasons
    if t.shape[0] != n:
        reasons.append(f"{name} has {t.shape[0]} elements; expected one per column ({n})")
    elif n > 1 and t.stride(0) != 1:
        reasons.append(f"{name} has stride {t.stride(0)}; the kernels need it contiguous")
    if dtype is not None and _dtype_name(t) != dtype:
        reasons.append(f"{name} has dtype {_dtype_name(t)}; expected {dtype}")
    return reasons


def stat_reasons(t: Any, name: str, m: int) -> list[str]:
    """A per-row statistic (mean, rstd): fp32, (M, 1), contiguous."""
    reasons = tensor_reasons(t, name, rank=2, dtypes_allowed=(STATS_DTYPE,))
    if reasons:
        return reasons
    if tuple(t.shape) != (m, 1):
        reasons.append(f"{name} has shape {tuple(t.shape)}; expected one per row ({m}, 1)")
    elif m > 1 and t.stride(0) != 1:
        reasons.append(f"{name} has row stride {t.stride(0)}; the kernels need it contiguous")
    return reasons


def _named(names: Sequence[str], tensors: Sequence[Any]) -> list[tuple[str, Any]]:
    return [(n, t) for n, t in zip(names, tensors) if is_tensor(t)]


def _outputs(out: Any, names: tuple[str, ...]) -> tuple[tuple[Any, ...] | None, list[str]]:
    if not isinstance(out, (tuple, list)) or len(out) != len(names):
        return None, [f"out must be a tuple ({', '.join(names)}), got {type(out).__name__}"
                      + (f" of {len(out)}" if isinstance(out, (tuple, list)) else "")]
    return tuple(out), []


def _eps_reasons(eps: Any) -> list[str]:
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        return [f"eps must be a Python float, got {type(eps).__name__}"]
    return []


def _absent_or_vector(t: Any, name: str, n: int) -> list[str]:
    """A weight or bias: absent (None) or a vector of N."""
    return [] if t is None else vector_reasons(t, name, n)


def forward_inputs_reasons(x: Any, weight: Any, bias: Any = None) -> list[str]:
    """Requirements.inputs of the forward kernels: what stops them from taking x, weight (and
    bias), on this machine. A None weight or bias is absent, which the kernels take."""
    reasons = rows_reasons(x, "x")
    if reasons:
        return reasons + ([] if weight is None or is_tensor(weight) else ["weight must be a torch.Tensor"])
    n = x.shape[1]
    reasons += _absent_or_vector(weight, "weight", n)
    reasons += _absent_or_vector(bias, "bias", n)
    named = _named(("x", "weight", "bias"), (x, weight, bias))
    return reasons + device_reasons(named, interpretable=True)


def forward_reasons(x: Any, weight: Any, bias: Any, out: Any, eps: Any, *, layer: bool) -> list[str]:
    """Everything wrong with a forward launcher's call (empty: it can launch)."""
    reasons = forward_inputs_reasons(x, weight, bias if layer else None) + _eps_reasons(eps)
    outs, problems = _outputs(out, ("y", "mean", "rstd") if layer else ("y", "rstd"))
    if outs is None or rows_reasons(x, "x"):
        return reasons + problems  # the outputs are checked against x
    m, n = x.shape
    reasons += rows_reasons(outs[0], "y", (m, n), _dtype_name(x), output=True)
    for name, t in zip(("mean", "rstd") if layer else ("rstd",), outs[1:]):
        reasons += stat_reasons(t, name, m)
    return reasons + device_reasons(_named(("x", "y", "mean", "rstd"), (x, *outs)), interpretable=True)


def backward_inputs_reasons(x: Any, weight: Any, *rest: Any) -> list[str]:
    """Requirements.inputs of the backward kernels: x, weight, [bias,] y, [mean,] rstd, grad_y
    (rms_norm: 5 tensors; layer_norm: 7)."""
    layer = len(rest) == 5
    bias = rest[0] if layer else None
    stats, grad_y = rest[-3:-1] if layer else rest[-2:-1], rest[-1]
    reasons = forward_inputs_reasons(x, weight, bias)
    if rows_reasons(x, "x"):
        return reasons  # the others are checked against x's shape
    m, n = x.shape
    names = ("mean", "rstd") if layer else ("rstd",)
    for name, t in zip(names, stats):
        reasons += stat_reasons(t, name, m)
    reasons += rows_reasons(grad_y, "grad_y", (m, n))
    return reasons + device_reasons(_named(("x", *names, "grad_y"), (x, *stats, grad_y)), interpretable=True)


def _grad_reasons(grad: Any, name: str, vector: Any, vector_name: str, n: int) -> list[str]:
    """The gradient of a weight or bias: None where that is absent (nothing to write), else a
    vector of N in its dtype."""
    if vector is None:
        return [] if grad is None else [f"{name} must be None: {vector_name} is None (absent), it has no gradient"]
    return vector_reasons(grad, name, n, _dtype_name(vector))


def backward_reasons(x: Any, weight: Any, bias: Any, mean: Any, rstd: Any, grad_y: Any, out: Any, *,
                     layer: bool) -> list[str]:
    """Everything wrong with a backward launcher's call."""
    stats = (mean, rstd) if layer else (rstd,)
    reasons = backward_inputs_reasons(x, weight, *((bias, None) if layer else (None,)), *stats, grad_y)
    outs, problems = _outputs(out, ("grad_x", "grad_weight", "grad_bias") if layer else ("grad_x", "grad_weight"))
    if outs is None or rows_reasons(x, "x") or _absent_or_vector(weight, "weight", x.shape[1]) or (
            layer and _absent_or_vector(bias, "bias", x.shape[1])):
        return reasons + problems  # the gradients are checked against x, the weight and the bias
    m, n = x.shape
    reasons += rows_reasons(outs[0], "grad_x", (m, n), _dtype_name(x), output=True)
    reasons += _grad_reasons(outs[1], "grad_weight", weight, "weight", n)
    if layer:
        reasons += _grad_reasons(outs[2], "grad_bias", bias, "bias", n)
    return reasons + device_reasons(_named(("x", "grad_x", "grad_weight", "grad_bias"), (x, *outs)), interpretable=True)
