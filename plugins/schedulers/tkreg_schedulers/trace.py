"""A probe that records, on the GPU, the tiles each program of a persistent launch visits, so the
real order can be compared with the scheduler's Python model.

``trace_kernel`` writes, for program p, its tile count at ``out[p, 0]`` and its i-th tile at
``out[p, 1 + 2 i]`` (pid_m) and ``out[p, 2 + 2 i]`` (pid_n).
"""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl

from tkreg import Scheduler
from tkreg.core.schedulers import gluon_impl

from .model import Order

UNWRITTEN = -1  # fill value: a slot the kernel never wrote stays -1


@gluon.jit
def trace_kernel(out_ptr, M, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, SchedulerImpl: gl.constexpr):
    scheduler = SchedulerImpl.initialize(M, N, BLOCK_M, BLOCK_N)
    # Rows of trace_width(): room for every tile of the matrix.
    row_stride = 1 + 2 * gl.cdiv(M, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    row = out_ptr + gl.program_id(0).to(gl.int64) * row_stride
    num_tiles = scheduler.get_num_tiles()
    gl.store(row, num_tiles)
    for idx in range(num_tiles):
        pid_m, pid_n = scheduler.get_tile(idx)
        gl.store(row + 1 + 2 * idx, pid_m)
        gl.store(row + 2 + 2 * idx, pid_n)


def trace_width(M: int, N: int, BLOCK_M: int, BLOCK_N: int) -> int:
    """Row length that holds any program's trace: a count and two ints per tile."""
    tiles = -(-M // BLOCK_M) * -(-N // BLOCK_N)
    return 1 + 2 * tiles


def visited_order(scheduler: str | Scheduler, M: int, N: int, BLOCK_M: int, BLOCK_N: int, num_programs: int) -> Order:
    """Run ``trace_kernel`` on the current CUDA device; per program, the (pid_m, pid_n) it visits."""
    import torch

    impl: Any = gluon_impl(scheduler)
    out = torch.full((num_programs, trace_width(M, N, BLOCK_M, BLOCK_N)), UNWRITTEN, dtype=torch.int32, device="cuda")
    trace_kernel[(num_programs,)](out, M, N, BLOCK_M, BLOCK_N, impl, num_warps=1)
    rows = out.cpu().tolist()
    order = []
    for program, row in enumerate(rows):
        count = row[0]
        if not 0 <= count <= (len(row) - 1) // 2:
            raise RuntimeError(f"program {program} reported {count} tiles; the trace holds at most {(len(row) - 1) // 2}")
        order.append([(row[1 + 2 * i], row[2 + 2 * i]) for i in range(count)])
    return order
