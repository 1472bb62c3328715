"""The sum_row op's contract: float64 reference, seeded inputs, output, cost model, torch peer and
gradient formula."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from tkreg.core.specs import Case, Cost

# Layouts make_inputs understands (Case.variant).
COLSLICE = "colslice"  # rows are a slice of wider rows: row stride > N
TRANSPOSED = "transposed"  # the transpose of a contiguous (N, M) tensor: last stride M, not 1
COLSLICE_PAD = 3  # extra columns; odd, so row starts lose 16-byte alignment too


def reference(x: torch.Tensor) -> torch.Tensor:
    return x.sum(dim=-1)


def make_inputs(case: Case, dtype: torch.dtype, generator: torch.Generator, device: str) -> tuple[torch.Tensor]:
    m, n = case["M"], case["N"]

    def randn(rows: int, cols: int) -> torch.Tensor:
        return torch.randn(rows, cols, generator=generator, dtype=dtype, device=device)

    if case.variant == "":
        return (randn(m, n),)
    if case.variant == COLSLICE:
        return (randn(m, n + COLSLICE_PAD)[:, :n],)
    if case.variant == TRANSPOSED:
        return (randn(n, m).t(),)
    raise ValueError(f"sum_row: unknown case variant {case.variant!r}; known: '', {COLSLICE!r}, {TRANSPOSED!r}")


def make_output(x: torch.Tensor) -> torch.Tensor:
    # as torch.sum: integers and bools sum to int64 (a bool "sum" would be an any())
    dtype = x.dtype if x.dtype.is_floating_point or x.dtype.is_complex else torch.int64
    return torch.empty(x.shape[0], dtype=dtype, device=x.device)


def cost(dims: Mapping[str, int], itemsize: int) -> Cost:
    m, n = dims["M"], dims["N"]
    return Cost(bytes=(m * n + m) * itemsize, flops=m * n)


def peer(x: torch.Tensor, out: torch.Tensor | None = None) -> Any:
    return torch.sum(x, dim=-1, out=out)


def backward(inputs: Any, outputs: Any, grad_outputs: Any) -> tuple[Any]:
    """Every element of a row contributes once to its sum: the row's gradient, broadcast over it."""
    (x,) = inputs
    (grad,) = grad_outputs
    return (grad.unsqueeze(-1).expand(x.shape),)


def tolerance_scale(dims: Mapping[str, int]) -> float:
    """atol grows with the row length; see plugin.TOLERANCES for the argument."""
    return float(dims["N"])
