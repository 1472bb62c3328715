"""The add op's contract: float64 reference, seeded inputs, output, cost model and
gradient formula."""

from __future__ import annotations

from typing import Any

import torch

from tkreg.core.specs import Case, Cost

from .add_checks import new_output

# C = A + B reads two tensors and writes one, each exactly once.
TENSORS_MOVED = 3
# Layouts make_inputs understands (Case.variant).
PADDED = "padded"  # rows sit in a wider allocation: row stride > N, padded to a 16-byte multiple
TRANSPOSED = "transposed"  # A is the transpose of a contiguous (N, M) tensor: last stride != 1
TMA_ALIGN_BYTES = 16  # row strides of padded inputs stay 16-byte multiples, so TMA can take them


def reference(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def make_inputs(case: Case, dtype: torch.dtype, generator: torch.Generator, device: str) -> tuple[torch.Tensor, ...]:
    m, n = case["M"], case["N"]

    def randn(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=generator, dtype=dtype, device=device)

    if case.variant == "":
        return randn(m, n), randn(m, n)
    if case.variant == PADDED:
        per_align = TMA_ALIGN_BYTES // dtype.itemsize
        stride = (n // per_align + 1) * per_align  # strictly wider than N, and a 16-byte multiple
        return randn(m, stride)[:, :n], randn(m, stride)[:, :n]
    if case.variant == TRANSPOSED:
        return randn(n, m).t(), randn(m, n)
    raise ValueError(f"add: unknown case variant {case.variant!r}; known: '', {PADDED!r}, {TRANSPOSED!r}")


def make_output(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return new_output(a)


def cost(dims: dict[str, int], itemsize: int) -> Cost:
    numel = dims["M"] * dims["N"]
    return Cost(bytes=TENSORS_MOVED * numel * itemsize, flops=numel)


def backward(inputs: Any, outputs: Any, grad_outputs: Any) -> tuple[Any, Any]:
    """d(a + b)/da = d(a + b)/db = 1: both get the upstream gradient as it is."""
    (grad,) = grad_outputs
    return grad, grad
