"""sum_row's shape classes: the rows' width decides how a kernel maps rows to programs, so kernels
are measured and ranked per class. Both the plugin's own score (:mod:`.ranking`) and tkreg.ops'
wall-time model (through the op's ``contract=rows(shape_class=...)``) group inputs by them.
Imports nothing heavy."""

from __future__ import annotations

from collections.abc import Mapping

NARROW_MAX_N = 128  # up to 512 bytes per fp32 row: many rows per program
MEDIUM_MAX_N = 4096  # a row fits one column step
LONG_MIN_N = 65536  # rows of 256 KB and more
FEW_ROWS = 1024  # fewer rows than this cannot fill the GPU with one row block per program


def row_class(m: int, n: int) -> str:
    """The class of an (m, n) input."""
    if n <= NARROW_MAX_N:
        return "narrow rows"
    if n <= MEDIUM_MAX_N:
        return "medium rows"
    if m < FEW_ROWS:
        return "few long rows"
    return "long rows" if n >= LONG_MIN_N else "square"


def shape_class(dims: Mapping[str, int]) -> str:
    """The class of kernel inputs of these dims (the rows contract names them M and N)."""
    return row_class(dims["M"], dims["N"])
