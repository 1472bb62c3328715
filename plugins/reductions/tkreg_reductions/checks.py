"""Input checks every sum_row launcher runs before launching, and the row-length limit of the
kernels that load whole rows as one block (also used by lookup with concrete inputs).

Every call first asks :func:`plainly_valid`, a few attribute reads that suffice for the full
checks to pass (tkreg.launch.inputs, "Fast checks"); only what it does not accept pays for the full
checks, which name everything that is wrong."""

from __future__ import annotations

from typing import Any

import torch

from tkreg.launch import inputs
from tkreg.launch.inputs import check_output, device_reasons, fail_if, tensor_reasons

DTYPES = ("float32", "float16", "bfloat16")

# sum_row and sum_row_blocked load whole rows (each padded to a power of two) as one block, and a
# triton block holds at most this many elements (triton.language.core.TRITON_MAX_TENSOR_NUMEL in
# triton 3.6.0; a test checks it). Longer rows are refused with a pointer to the kernels that walk
# the row. Below it the block does not spill: compiled for sm_90a, BLOCK_N = 2**17 and 2**20 use
# 64 and 90 registers and no local memory (the loads stream into the per-thread accumulation).
MAX_BLOCK_ELEMENTS = 1 << 20
# sum_row_blocked's own choice of rows per program: about this many elements per block (1 to
# BLOCKED_MAX_ROWS rows): 4 rows of 1024 or 128 rows of 32, the choices measured on an H100 (2026-11-22).
BLOCKED_BLOCK_ELEMENTS = 4096
BLOCKED_MAX_ROWS = 64


def next_power_of_2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def plainly_valid(x: Any, out: Any | None) -> bool:
    """A sufficient condition for :func:`validate` to accept (x, out): a plain torch tensor on an
    ``inputs.FAST_DEVICE_TYPE`` device, 2-D, non-empty, of a supported dtype, and an ``out``
    (if given) of M elements, stride 1, same dtype and device. False: run the full checks."""
    tensor = torch.Tensor
    if type(x) is not tensor:
        return False
    shape, dtype = x.shape, x.dtype
    if len(shape) != 2 or 0 in shape or dtype not in inputs.torch_dtypes(DTYPES) or x.device.type != inputs.FAST_DEVICE_TYPE:
        return False
    if out is None:
        return True
    m = shape[0]
    return (
        type(out) is tensor
        and out.dtype is dtype
        and out.shape == (m,)
        and out.device == x.device
        and (m == 1 or out.stride(0) == 1)
    )


def validate(x: Any, out: Any | None) -> torch.Tensor:
    """Check x (2-D, supported dtype, non-empty, on a device this process can run) and out;
    return the output to write."""
    if not plainly_valid(x, out):
        fail_if(tensor_reasons(x, "x", rank=2, dtypes_allowed=DTYPES))
        fail_if(device_reasons([("x", x)], interpretable=True))
        if out is not None:
            fail_if(tensor_reasons(out, "out", rank=1))
            check_output(out, (x.shape[0],), x.dtype, x.device)
            if out.shape[0] > 1 and out.stride(0) != 1:
                # The kernels write out[i] at out + i: a strided view would get wrong elements
                # written (and a stride-0 view, memory past its storage).
                fail_if([f"out must be contiguous (stride 1); got stride {out.stride(0)}: pass out=None or a contiguous tensor"])
    if out is None:
        return torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
    return out


def whole_row_reasons(kernel: str, rows_per_program: int, x: Any) -> list[str]:
    block = rows_per_program * next_power_of_2(x.shape[-1])
    if block <= MAX_BLOCK_ELEMENTS:
        return []
    return [
        f"{kernel} loads {rows_per_program} whole row(s) of {x.shape[-1]} elements as one block of {block} "
        f"padded elements; triton allows at most {MAX_BLOCK_ELEMENTS}: use sum_row_tiled or sum_row_blocked_iterative"
    ]


def sum_row_inputs_reasons(x: Any) -> list[str]:
    """Requirements.inputs for sum_row (one row per program)."""
    return whole_row_reasons("sum_row", 1, x)


def default_block_m(n: int) -> int:
    """sum_row_blocked's own choice of rows per program for rows of n elements."""
    return max(1, min(BLOCKED_MAX_ROWS, BLOCKED_BLOCK_ELEMENTS // next_power_of_2(n)))


def sum_row_blocked_inputs_reasons(x: Any, config: dict[str, Any] | None = None) -> list[str]:
    """Requirements.inputs for sum_row_blocked, at the BLOCK_M it will be launched with."""
    block_m = (config or {}).get("BLOCK_M") or default_block_m(x.shape[-1])
    return whole_row_reasons("sum_row_blocked", int(block_m), x)
