"""Input checks every sum_row launcher runs before launching, and the row-length limits of the
kernels that hold whole rows in registers (also used by lookup with concrete inputs)."""

from __future__ import annotations

from typing import Any

import torch

from tkreg.inputs import check_output, device_reasons, fail_if, tensor_reasons

DTYPES = ("float32", "float16", "bfloat16")

# sum_row and sum_row_blocked load a whole row (padded to a power of two) as one block. Above this
# many elements per program the block no longer fits in registers and spills to local memory, so
# longer rows are refused with a pointer to the kernels that walk the row.
MAX_BLOCK_ELEMENTS = 16384


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def validate(x: Any, out: Any | None) -> torch.Tensor:
    """Check x (2-D, supported dtype, non-empty, on a device this process can run) and out;
    return the output to write."""
    fail_if(tensor_reasons(x, "x", rank=2, dtypes_allowed=DTYPES))
    fail_if(device_reasons([("x", x)], interpretable=True))
    if out is None:
        return torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    check_output(out, (x.shape[0],), x.dtype, x.device)
    return out


def whole_row_reasons(kernel: str, rows_per_program: int, x: Any) -> list[str]:
    block = rows_per_program * next_power_of_2(x.shape[-1])
    if block <= MAX_BLOCK_ELEMENTS:
        return []
    return [
        f"{kernel} holds {rows_per_program} whole row(s) of {x.shape[-1]} elements in registers "
        f"({block} padded elements > {MAX_BLOCK_ELEMENTS}); use sum_row_tiled or sum_row_blocked_iterative"
    ]


def sum_row_inputs_reasons(x: Any) -> list[str]:
    """Requirements.inputs for sum_row (one row per program)."""
    return whole_row_reasons("sum_row", 1, x)


def default_block_m(n: int) -> int:
    """sum_row_blocked's own choice: a quarter of the register limit per program, 1 to 64 rows."""
    return max(1, min(64, MAX_BLOCK_ELEMENTS // 4 // next_power_of_2(n)))


def sum_row_blocked_inputs_reasons(x: Any, config: dict[str, Any] | None = None) -> list[str]:
    """Requirements.inputs for sum_row_blocked, at the BLOCK_M it will be launched with."""
    block_m = (config or {}).get("BLOCK_M") or default_block_m(x.shape[-1])
    return whole_row_reasons("sum_row_blocked", int(block_m), x)
