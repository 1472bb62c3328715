"""``add_tma``: C = A + B in Gluon with TMA, software-pipelined.

Each program walks its run of tiles (see tkreg_elementwise.tma_tiles) with ``num_buffers`` slots of A and
B tiles in shared memory: the TMA loads of the next ``num_buffers - 1`` tiles are in flight while
one is added; a slot is refilled as soon as its tiles are in registers. Results go out through
``num_store_buffers`` shared tiles and TMA stores, which run in the background until the slot is
needed again. TMA zero-fills the out-of-bounds part of a partial tile on load and clips it on
store, so any shape whose rows TMA can address works without masks.

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

# Measured on an H100 (2026-11-22; notes/tuning.md, "add"): at
# 32768^2 unswizzled 16 KB tiles of 256 columns, runs of 3 tiles per program with all 3 in flight
# and 2 store slots read 3077 GB/s fp32 (1.008x torch.add) and 3067 bf16 (1.000x); the persistent
# kernel this replaced stopped at 0.96x whatever its tile and depth.
DEFAULTS: dict[int, dict[str, int]] = {
    4: {"XBLOCK": 16, "YBLOCK": 256, "num_buffers": 3, "num_store_buffers": 2, "num_warps": 4, "tiles_per_program": 3,
        "swizzle": 0},
    2: {"XBLOCK": 32, "YBLOCK": 256, "num_buffers": 3, "num_store_buffers": 2, "num_warps": 4, "tiles_per_program": 3,
        "swizzle": 0},
}


# M, N and per_program only place tiles: specializing on their divisibility would recompile per shape class.
@gluon.jit(do_not_specialize=["M", "N", "per_program"])
def add_tma_kernel(
    a_desc,
    b_desc,
    c_desc,
    M,
    N,
    per_program,
    XBLOCK: gl.constexpr,
    YBLOCK: gl.constexpr,
    num_buffers: gl.constexpr,
    num_store_buffers: gl.constexpr,
    layout: gl.constexpr,
):
    count, tiles_y = tile_count(M, N, per_program, XBLOCK, YBLOCK)
    dtype: gl.constexpr = a_desc.dtype
    a_bufs = gl.allocate_shared_memory(dtype, [num_buffers, XBLOCK, YBLOCK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(dtype, [num_buffers, XBLOCK, YBLOCK], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(dtype, [num_store_buffers, XBLOCK, YBLOCK], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [num_buffers, 1], mbarrier.MBarrierLayout())
    for s in gl.static_range(num_buffers):
        mbarrier.init(ready.index(s), count=1)

    for s in gl.static_range(num_buffers):
        load_tiles(a_desc, b_desc, a_bufs, b_bufs, ready, s, s, count, tiles_y, per_program, XBLOCK, YBLOCK)

    for i in range(count):
        a, b, slot = take_tiles(a_bufs, b_bufs, ready, i, layout)
        # The slot's tiles are in registers (and fenced): refill it with the tile num_buffers ahead.
        load_tiles(a_desc, b_desc, a_bufs, b_bufs, ready, slot, i + num_buffers, count, tiles_y, per_program, XBLOCK, YBLOCK)

        c_slot = c_bufs.index(i % num_store_buffers)
        # The store that last used this slot (num_store_buffers tiles ago) must have read it.
        tma.store_wait(num_store_buffers - 1)
        c_slot.store(a + b)
        fence_async_shared()  # the shared store must be visible to the TMA store (async proxy)
        xoff, yoff = tile_origin(i, tiles_y, per_program, XBLOCK, YBLOCK)
        tma.async_copy_shared_to_global(c_desc, [xoff, yoff], c_slot)

    tma.store_wait(0)
    for s in gl.static_range(num_buffers):
        mbarrier.invalidate(ready.index(s))


KERNEL = TmaAddKernel(
    name="add_tma",
    fn=add_tma_kernel,
    defaults=DEFAULTS,
    load_buffers="num_buffers",
    warps=(1, 2, 4, 8, 16),
    constexprs={},
    options={},
)


def add_tma(a: Any, b: Any, out: Any = None, **params: Any) -> Any:
    """out = a + b for 2-D float32/float16/bfloat16 CUDA tensors TMA can address (16-byte aligned
    base and row stride, last stride 1). Parameters: XBLOCK, YBLOCK, num_buffers,
    num_store_buffers, num_warps, tiles_per_program, swizzle; missing ones take the dtype's default."""
    return KERNEL.launch(a, b, out, params)


def aot(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return KERNEL.aot(dtype, config)
