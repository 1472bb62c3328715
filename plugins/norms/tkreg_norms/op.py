"""The contracts of rms_norm and layer_norm: float64 references, seeded inputs, outputs, cost
models, and torch's implementations as peer and rival.

The weight (and layer_norm's bias) may be absent, passed as None (Op.optional), as torch's
functions take them: nn.LayerNorm(d, bias=False), nn.LayerNorm(d, elementwise_affine=False),
nn.RMSNorm(d, elementwise_affine=False). Every function here takes None in its place."""

from __future__ import annotations

import types
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.nn.functional as F

from tkreg.core.specs import Case, Cost

# Layouts make_inputs understands (Case.variant).
PADDED = "padded"  # rows inside wider rows: row stride N + pad, 16-byte aligned row starts
OFFSET = "offset"  # an odd row stride and a base one element in: no row start is 16-byte aligned
# Variants that leave inputs out (None; x contiguous): the weight, the bias, or every vector the
# op has (nn.RMSNorm's and nn.LayerNorm's elementwise_affine=False).
NO_WEIGHT = "no_weight"
NO_BIAS = "no_bias"
NO_AFFINE = "no_affine"
LEFT_OUT = {NO_WEIGHT: ("weight",), NO_BIAS: ("bias",)}
VARIANTS = ("", PADDED, OFFSET, NO_WEIGHT, NO_BIAS, NO_AFFINE)
ALIGN_BYTES = 16
STATS_BYTES = 4  # mean and rstd are fp32, one per row


# -- references (float64 copies of the inputs; autograd of them gives the gradients) -----------


# The statistics keep the normalized dim, of size 1: (..., 1), as torch.native_layer_norm and
# torch._fused_rms_norm return them, so the full peers hand theirs on as they are. An absent
# weight or bias is left out of the arithmetic (not ones or zeros made up for it).
def _affine(y: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None = None) -> torch.Tensor:
    if weight is not None:
        y = y * weight
    return y if bias is None else y + bias


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    rstd = torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return _affine(x * rstd, weight), rstd


def layer_norm_reference(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    mean = x.mean(dim=-1, keepdim=True)
    centred = x - mean
    rstd = torch.rsqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps)
    return _affine(centred * rstd, weight, bias), mean, rstd


# -- inputs and outputs -------------------------------------------------------------------------


def _rows(case: Case, dtype: torch.dtype, generator: torch.Generator, device: str) -> torch.Tensor:
    """x of the case: standard normal values (x and every gradient are O(1), which the
    tolerances assume), laid out as the variant says."""
    m, n = case["M"], case["N"]
    if case.variant not in VARIANTS:
        raise ValueError(f"norms: unknown case variant {case.variant!r}; known: {', '.join(map(repr, VARIANTS))}")
    if case.variant not in (PADDED, OFFSET):
        return torch.randn(m, n, generator=generator, dtype=dtype, device=device)
    if case.variant == PADDED:
        per_align = ALIGN_BYTES // dtype.itemsize
        stride = (n // per_align + 1) * per_align  # wider than N, a multiple of 16 bytes
        return torch.randn(m, stride, generator=generator, dtype=dtype, device=device)[:, :n]
    stride = n + 3 if (n + 3) % 2 else n + 4  # odd, so consecutive rows alternate alignment
    flat = torch.randn(m * stride + 1, generator=generator, dtype=dtype, device=device)
    return flat[1:].view(m, stride)[:, :n]


def absent_inputs(case: Case, vectors: tuple[str, ...]) -> tuple[str, ...]:
    """The vectors (of ``vectors``, the op's: weight, bias) the case's variant leaves out."""
    if case.variant == NO_AFFINE:
        return vectors
    absent = LEFT_OUT.get(case.variant, ())
    unknown = [name for name in absent if name not in vectors]
    if unknown:
        raise ValueError(f"norms: case variant {case.variant!r} leaves out {', '.join(unknown)}, "
                         f"which this op does not take (it takes {', '.join(vectors)})")
    return absent


def _vectors(case: Case, names: tuple[str, ...], dtype: torch.dtype, generator: torch.Generator,
             device: str) -> tuple[torch.Tensor | None, ...]:
    """One standard normal vector of N per name, in order; None for those the variant leaves out
    (they draw nothing from the generator)."""
    absent = absent_inputs(case, names)
    return tuple(None if name in absent else torch.randn(case["N"], generator=generator, dtype=dtype, device=device)
                 for name in names)


def rms_norm_inputs(case: Case, dtype: torch.dtype, generator: torch.Generator, device: str) -> tuple[torch.Tensor | None, ...]:
    x = _rows(case, dtype, generator, device)
    return x, *_vectors(case, ("weight",), dtype, generator, device)


def layer_norm_inputs(case: Case, dtype: torch.dtype, generator: torch.Generator, device: str) -> tuple[torch.Tensor | None, ...]:
    x = _rows(case, dtype, generator, device)
    return x, *_vectors(case, ("weight", "bias"), dtype, generator, device)


def _stat(x: torch.Tensor) -> torch.Tensor:
    return torch.empty((*x.shape[:-1], 1), dtype=torch.float32, device=x.device)


def rms_norm_outputs(x: torch.Tensor, weight: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
    """y (contiguous, x's dtype) and rstd (fp32, one per row: (..., 1)), with or without a weight."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), _stat(x)


def layer_norm_outputs(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """y, mean and rstd."""
    return torch.empty(x.shape, dtype=x.dtype, device=x.device), _stat(x), _stat(x)


# -- cost models: the bytes each op must move, and its arithmetic -------------------------------


def rms_norm_cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    m, n = dims["M"], dims["N"]
    # x read, y written, the weight read once, rstd written
    return Cost(bytes=2 * m * n * itemsize + n * itemsize + m * STATS_BYTES, flops=4 * m * n)


def rms_norm_backward_cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    m, n = dims["M"], dims["N"]
    # x and dy read, dx written; the weight read and its gradient written; rstd read
    return Cost(bytes=3 * m * n * itemsize + 2 * n * itemsize + m * STATS_BYTES, flops=8 * m * n)


def layer_norm_cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    m, n = dims["M"], dims["N"]
    # x read, y written, weight and bias read, mean and rstd written
    return Cost(bytes=2 * m * n * itemsize + 2 * n * itemsize + 2 * m * STATS_BYTES, flops=7 * m * n)


def layer_norm_backward_cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    m, n = dims["M"], dims["N"]
    # x and dy read, dx written; weight read, weight and bias gradients written; mean, rstd read
    return Cost(bytes=3 * m * n * itemsize + 3 * n * itemsize + 2 * m * STATS_BYTES, flops=11 * m * n)


# -- torch as peer and rival ---------------------------------------------------------------------


def _fill(out: Any, y: torch.Tensor) -> Any:
    """Give out's y the values of ``y``. torch's functions have no out=, and a copy would add a
    full read and write of y to every call the benchmarks time (about doubling a norm's
    traffic), so out's y takes over y's storage instead: a metadata change, no kernel."""
    out[0].set_(y)
    return out


def rms_norm_peer(x: torch.Tensor, weight: torch.Tensor | None, *, out: Any = None, eps: float) -> Any:
    """F.rms_norm (its C function: F's Python layer costs the host about a microsecond); fills y
    only (rstd is the kernels' own). With out=None returns y, which tkreg.ops then hands to
    callers as it is."""
    y = torch.rms_norm(x, (x.shape[-1],), weight, eps)
    return y if out is None else _fill(out, y)


def layer_norm_peer(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *, out: Any = None,
                    eps: float) -> Any:
    """F.layer_norm (its C function); fills y only. With out=None returns y."""
    y = torch.layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return y if out is None else _fill(out, y)


# The full peers: torch's functions that also return the statistics F.* computes and drops, each
# (..., 1) as the op keeps them (a squeeze per statistic would cost the host about 2.7 us a call).
def _row_stat(t: torch.Tensor) -> torch.Tensor:
    """A statistic as the op keeps it: fp32 (torch's CPU kernels keep x's dtype)."""
    return t if t.dtype is torch.float32 else t.float()


def rms_norm_full_peer(x: torch.Tensor, weight: torch.Tensor | None, *, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """y and rstd from torch._fused_rms_norm, F.rms_norm's own kernel."""
    y, rstd = torch._fused_rms_norm(x, (x.shape[-1],), weight, eps)
    return y, _row_stat(rstd)


def layer_norm_full_peer(
    x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *, eps: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """y, mean and rstd from torch.native_layer_norm, F.layer_norm's own kernel."""
    y, mean, rstd = torch.native_layer_norm(x, (x.shape[-1],), weight, bias, eps)
    return y, _row_stat(mean), _row_stat(rstd)


# torch.compile of the same functions, one compiled function per input signature. Dynamo keeps
# its compiled code per code object and stops recompiling one after a few shapes (falling back to
# eager, which would time torch instead of its compiler); each signature gets its own copy of the
# code, so every benchmark case is compiled for its static shape.
_COMPILED: dict[tuple[Any, ...], Callable[..., Any]] = {}


def _eager_rms_norm(x: torch.Tensor, weight: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def _eager_layer_norm(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, eps: float) -> torch.Tensor:
    return F.layer_norm(x, (x.shape[-1],), weight, bias, eps)


def _signature(t: torch.Tensor | None) -> tuple[Any, ...] | None:
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device)


def _compiled(fn: types.FunctionType, tensors: tuple[torch.Tensor | None, ...], eps: float) -> Callable[..., Any]:
    grad = torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)
    key = (fn.__name__, eps, grad, *map(_signature, tensors))
    compiled = _COMPILED.get(key)
    if compiled is None:
        code = fn.__code__.replace(co_name=f"{fn.__name__}_{len(_COMPILED)}")
        copy = types.FunctionType(code, fn.__globals__, code.co_name, fn.__defaults__, fn.__closure__)
        compiled = _COMPILED[key] = torch.compile(copy, dynamic=False, fullgraph=True)
    return compiled


def rms_norm_compiled(x: torch.Tensor, weight: torch.Tensor | None, *, out: Any = None, eps: float) -> Any:
    """torch.compile of F.rms_norm (the rival benchmarks time beside the peer)."""
    y = _compiled(_eager_rms_norm, (x, weight), eps)(x, weight, eps)
    return (y,) if out is None else _fill(out, y)


def layer_norm_compiled(x: torch.Tensor, weight: torch.Tensor | None, bias: torch.Tensor | None, *, out: Any = None,
                        eps: float) -> Any:
    """torch.compile of F.layer_norm."""
    y = _compiled(_eager_layer_norm, (x, weight, bias), eps)(x, weight, bias, eps)
    return (y,) if out is None else _fill(out, y)
