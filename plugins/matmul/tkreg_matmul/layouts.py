"""The two layouts of B a TMA matmul reads without a copy, told apart from B's strides, and the
reasons B fits neither. Duck-typed: nothing here imports torch.

- ``kn``: B is a row-major (K, N) tensor (``x @ w``): rows of N elements, last stride 1.
- ``nk``: B is the transposed view of a row-major (N, K) tensor W (``x @ W.t()``, i.e. ``F.linear``
  with an ``nn.Linear`` weight as stored): B's first stride is 1, and a TMA descriptor is built on
  W itself, whose rows of K elements must be 16-byte aligned like any TMA tensor's.
"""

from __future__ import annotations

from typing import Any

from tkreg.launch.inputs import tma_reasons

KN = "kn"
NK = "nk"
LAYOUTS = (KN, NK)


class TransposedView:
    """The metadata of ``t.t()`` for a 2-D tensor (or a duck-typed stand-in): what the TMA checks
    read, without needing ``t.t()`` itself."""

    def __init__(self, t: Any) -> None:
        self._t = t
        self.shape = tuple(reversed(tuple(t.shape)))
        self.dtype = t.dtype

    def stride(self, dim: int | None = None) -> Any:
        strides = tuple(reversed(tuple(self._t.stride())))
        return strides if dim is None else strides[dim]

    def dim(self) -> int:
        return 2

    def data_ptr(self) -> int:
        return self._t.data_ptr()

    def element_size(self) -> int:
        return self._t.element_size()


def b_layout(b: Any) -> str | None:
    """Which layout B is read in: ``kn`` where its last stride is 1, else ``nk`` where its first is;
    None where neither dimension is contiguous. (Layout only; alignment is :func:`b_tma_reasons`'s.)"""
    if b.stride(1) == 1:
        return KN
    if b.stride(0) == 1:
        return NK
    return None


def b_tma_reasons(b: Any, name: str = "b") -> tuple[str | None, list[str]]:
    """(layout, reasons): the layout a TMA descriptor can read B in, or None with the reasons it
    cannot. A B with unit strides both ways (a single row or column) is tried as ``kn`` first."""
    layout = b_layout(b)
    if layout is None:
        return None, [
            f"{name}: no dimension has stride 1 (strides {tuple(b.stride())}); TMA reads B as a row-major (K, N) "
            "tensor or as the transpose of a row-major (N, K) weight"
        ]
    if layout == KN:
        reasons = tma_reasons(b, name)
        if not reasons:
            return KN, []
        if b.stride(0) != 1:
            return None, reasons
    weight = f"{name}.t() (B read as the transpose of an (N, K) weight)"
    reasons = tma_reasons(TransposedView(b), weight)
    return (NK, []) if not reasons else (None, reasons)
