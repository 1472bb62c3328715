"""``add_warp_specialized``: C = A + B in Gluon with warp specialization (seed 004, on triton 3.6).

Three partitions share ``num_load_buffers`` slots of A and B tiles and ``num_store_buffers`` slots
of C tiles in shared memory:
- load (1 warp): waits for a free slot, starts the TMA loads of the next tile into it;
- compute (the default partition, num_warps warps): waits for a loaded slot, adds it in
  registers, frees it, waits for a free C slot, writes the sum there and hands it on;
- store (1 warp): TMA-stores each C slot, keeps num_store_buffers - 1 stores in flight and frees
  a slot once its store has read it.
Every slot has a "ready" and an "empty" mbarrier (count 1). A fresh mbarrier counts as having
completed the phase before phase 0, so producers wait on the opposite parity first and start at
once. Unlike the seed (one program per row of tiles), a program handles a run of
tiles_per_program tiles; every partition walks the same run (tkreg_elementwise.tma_tiles).

Exact for the reasons given in tkreg_elementwise.add_triton (one add, innocuous double rounding).
"""

from __future__ import annotations

from typing import Any

from tkreg_elementwise.tma_launch import TmaAddKernel
from tkreg_elementwise.tma_tiles import load_tiles, take_tiles, tile_count, tile_origin
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

from tkreg.launch.aot import AotSpec

# Measured on an H100 (2026-11-22; notes/tuning.md, "add"): as for
# add_tma, unswizzled 16 KB tiles of 256 columns in runs of 3 tiles per program, 3 load and 2
# store slots: 3079 GB/s fp32 (1.009x torch.add) and 3069 bf16 (1.001x) at 32768^2.
DEFAULTS: dict[int, dict[str, int]] = {
    4: {"XBLOCK": 16, "YBLOCK": 256, "num_load_buffers": 3, "num_store_buffers": 2, "num_warps": 4, "tiles_per_program": 3,
        "swizzle": 0},
    2: {"XBLOCK": 32, "YBLOCK": 256, "num_load_buffers": 3, "num_store_buffers": 2, "num_warps": 4, "tiles_per_program": 3,
        "swizzle": 0},
}
# Register budget. The load and store partitions hold only scalars: 24 registers per thread,
# the least setmaxnreg allows (the seed's setting; registers go in multiples of 8 in [24, 256]).
WORKER_WARPS = 1
WORKER_REGS = 24
# The whole kernel's per-thread limit; the compute partition gets what the workers leave. 128 is
# the seed's; with num_warps + 4 warps it stays within the SM's 64 Ki registers up to 8 warps.
MAXNREG = 128


@gluon.jit
def _load_partition(
    a_desc, b_desc, a_bufs, b_bufs, load_ready, load_empty, M, N, per_program, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr
):
    count, tiles_y = tile_count(M, N, per_program, XBLOCK, YBLOCK)
    num_buffers: gl.constexpr = a_bufs.shape[0]
    for i in range(count):
        slot = i % num_buffers
        mbarrier.wait(load_empty.index(slot), ((i // num_buffers) & 1) ^ 1)
        load_tiles(a_desc, b_desc, a_bufs, b_bufs, load_ready, slot, i, count, tiles_y, per_program, XBLOCK, YBLOCK)


@gluon.jit
def _compute_partition(
    a_bufs,
    b_bufs,
    c_bufs,
    load_ready,
    load_empty,
    c_ready,
    c_empty,
    M,
    N,
    per_program,
    XBLOCK: gl.constexpr,
    YBLOCK: gl.constexpr,
    layout: gl.constexpr,
):
    count = tile_count(M, N, per_program, XBLOCK, YBLOCK)[0]
    num_store_buffers: gl.constexpr = c_bufs.shape[0]
    for i in range(count):
        # In registers and fenced against the loader's next TMA write into the slot: free it.
        a, b, slot = take_tiles(a_bufs, b_bufs, load_ready, i, layout)
        mbarrier.arrive(load_empty.index(slot), count=1)

        c_slot = i % num_store_buffers
        mbarrier.wait(c_empty.index(c_slot), ((i // num_store_buffers) & 1) ^ 1)
        c_bufs.index(c_slot).store(a + b)
        fence_async_shared()  # the shared store must be visible to the TMA store (async proxy)
        mbarrier.arrive(c_ready.index(c_slot), count=1)


@gluon.jit
def _store_partition(c_desc, c_bufs, c_ready, c_empty, M, N, per_program, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr):
    count, tiles_y = tile_count(M, N, per_program, XBLOCK, YBLOCK)
    num_buffers: gl.constexpr = c_bufs.shape[0]
    in_flight: gl.constexpr = num_buffers - 1
    for i in range(count):
        slot = i % num_buffers
        mbarrier.wait(c_ready.index(slot), (i // num_buffers) & 1)
        xoff, yoff = tile_origin(i, tiles_y, per_program, XBLOCK, YBLOCK)
        tma.async_copy_shared_to_global(c_desc, [xoff, yoff], c_bufs.index(slot))
        # Once at most in_flight stores are pending, the one issued in_flight tiles ago has read
        # its slot, (i - in_flight) mod num_buffers == (i + 1) mod num_buffers: free it.
        tma.store_wait(in_flight)
        mbarrier.arrive(c_empty.index((i + 1) % num_buffers), count=1, pred=i >= in_flight)
    tma.store_wait(0)


@gluon.jit
def _init_barriers(bars, num: gl.constexpr):
    for s in gl.static_range(num):
        mbarrier.init(bars.index(s), count=1)


# M, N and per_program only place tiles: specializing on their divisibility would recompile per shape class.
@gluon.jit(do_not_specialize=["M", "N", "per_program"])
def add_ws_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    per_program,
    XBLOCK: gl.constexpr,
    YBLOCK: gl.constexpr,
    num_load_buffers: gl.constexpr,
    num_store_buffers: gl.constexpr,
    layout: gl.constexpr,
    worker_warps: gl.constexpr,
    worker_regs: gl.constexpr,
):
    """Each worker (load, store) runs on ``worker_warps`` warps with ``worker_regs`` registers."""
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [num_load_buffers, XBLOCK, YBLOCK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [num_load_buffers, XBLOCK, YBLOCK], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [num_store_buffers, XBLOCK, YBLOCK], c_desc.layout)
    load_ready = gl.allocate_shared_memory(gl.int64, [num_load_buffers, 1], mbarrier.MBarrierLayout())
    load_empty = gl.allocate_shared_memory(gl.int64, [num_load_buffers, 1], mbarrier.MBarrierLayout())
    c_ready = gl.allocate_shared_memory(gl.int64, [num_store_buffers, 1], mbarrier.MBarrierLayout())
    c_empty = gl.allocate_shared_memory(gl.int64, [num_store_buffers, 1], mbarrier.MBarrierLayout())
    _init_barriers(load_ready, num_load_buffers)
    _init_barriers(load_empty, num_load_buffers)
    _init_barriers(c_ready, num_store_buffers)
    _init_barriers(c_empty, num_store_buffers)

    # triton 3.6: a list of (function, args) with the default partition first; each worker gets
    # its own argument tuple (scalars, descriptors and shared memory only: no register tensors).
    # (A tuple holding a constexpr layout cannot be bound to a name in Gluon: pass it inline.)
    gl.warp_specialize(
        [
            (
                _compute_partition,
                (a_bufs, b_bufs, c_bufs, load_ready, load_empty, c_ready, c_empty, M, N, per_program, XBLOCK, YBLOCK, layout),
            ),
            (_load_partition, (a_desc, b_desc, a_bufs, b_bufs, load_ready, load_empty, M, N, per_program, XBLOCK, YBLOCK)),
            (_store_partition, (c_desc, c_bufs, c_ready, c_empty, M, N, per_program, XBLOCK, YBLOCK)),
        ],
        [worker_warps, worker_warps],
        [worker_regs, worker_regs],
    )


KERNEL = TmaAddKernel(
    name="add_warp_specialized",
    fn=add_ws_kernel,
    defaults=DEFAULTS,
    load_buffers="num_load_buffers",
    warps=(4, 8),  # the compute partition: one or two warpgroups
    constexprs={"worker_warps": WORKER_WARPS, "worker_regs": WORKER_REGS},
    options={"maxnreg": MAXNREG},
)


def add_warp_specialized(a: Any, b: Any, out: Any = None, **params: Any) -> Any:
    """out = a + b for 2-D float32/float16/bfloat16 CUDA tensors TMA can address (16-byte aligned
    base and row stride, last stride 1). Parameters: XBLOCK, YBLOCK, num_load_buffers,
    num_store_buffers, num_warps (compute partition), tiles_per_program, swizzle; missing ones take the
    dtype's default."""
    return KERNEL.launch(a, b, out, params)


def aot(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return KERNEL.aot(dtype, config)
