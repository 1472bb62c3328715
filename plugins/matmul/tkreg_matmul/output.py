"""Allocate or check the output a matmul launcher writes."""

from __future__ import annotations

from typing import Any

from tkreg.launch.inputs import check_output


def output_for(a: Any, b: Any, out: Any = None) -> Any:
    """``out`` after checking it is (M, N) (or (Bt, M, N) for batches) of a's dtype on a's device,
    or a new one if None."""
    if out is None:
        from .op import make_output

        return make_output(a, b)
    check_output(out, (*a.shape[:-1], b.shape[-1]), a.dtype, a.device)
    return out
