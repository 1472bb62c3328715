"""Calling contracts: how callers' tensors of any rank map onto the inputs an op's kernels take.

An op declares one (``Op(contract=tkreg.contracts.rows())``); ``tkreg.ops`` carries it out: it
checks callers' inputs against it, views them as kernel inputs without copying, and gives the
outputs the caller's leading dims back. The core only holds the declaration.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import refs
from .errors import SpecError
from .refs import Ref


@dataclass(frozen=True)
class Contract:
    """How callers' tensors of any rank map onto the inputs kernels take (see tkreg.ops).

    kind:
    - "plain": inputs go to kernels as they are; the op's ``make_output`` allocates.
    - "elementwise": tensors of one shape (any rank) are viewed as 2-D (rows, cols) without a copy;
      outputs are viewed back to that shape.
    - "rows": the first input (..., N) is viewed as (rows, N) with its leading dims merged; the
      other inputs (per-column weights, per-row targets with the same leading dims) are passed as
      they are or, where they have the first input's leading dims, merged the same way; outputs
      whose first dim is the rows get the caller's leading dims back.
    - "linear": a (..., K) input times a (K, N) matrix, as F.linear uses a transposed weight; the
      output is (..., N). With ``batched``, 3-D (B, M, K) @ (B, K, N) is taken too.
    ``shape_class(dims) -> str`` names the class of kernel inputs measured rankings group by
    (e.g. narrow / long rows); default: one class.
    """

    kind: str = "plain"
    batched: bool = False
    shape_class: Ref | None = None
    dims: tuple[str, ...] = ()  # names of the kernel inputs' sizes, as the op's cases name them

    KINDS = ("plain", "elementwise", "rows", "linear")

    def __post_init__(self) -> None:
        if self.kind not in self.KINDS:
            raise SpecError("contract", self.kind, "kind", f"must be one of {', '.join(self.KINDS)}")
        if self.shape_class is not None and not refs.is_valid(self.shape_class):
            raise SpecError("contract", self.kind, "shape_class", "must be a callable or 'pkg.mod:attr'")
        if self.batched and self.kind != "linear":
            raise SpecError("contract", self.kind, "batched", "only a linear contract can be batched")


def plain() -> Contract:
    return Contract("plain")


def elementwise(shape_class: Ref | None = None) -> Contract:
    return Contract("elementwise", shape_class=shape_class, dims=("M", "N"))


def rows(shape_class: Ref | None = None) -> Contract:
    return Contract("rows", shape_class=shape_class, dims=("M", "N"))


def linear(batched: bool = False, shape_class: Ref | None = None) -> Contract:
    return Contract("linear", batched=batched, shape_class=shape_class, dims=("M", "N", "K"))

