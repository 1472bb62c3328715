"""The matmul shape classes tkreg.ops' wall-time model groups measured points by (through the op's
``contract=linear(shape_class=...)``). Imports nothing heavy."""

from __future__ import annotations

from collections.abc import Mapping

# An output this thin in M or N leaves most SMs without a tile of the big tile shapes.
SKINNY_MAX = 256


def shape_class(dims: Mapping[str, int]) -> str:
    return "skinny" if min(dims["M"], dims["N"]) <= SKINNY_MAX else "large"
