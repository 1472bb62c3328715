"""Gluon pieces the two TMA add kernels (tkreg-tma-elementwise, tkreg-warp-specialized-add)
share: the tile order and the register layout for shared-memory round trips. Imports triton;
only kernel modules import it.

Program p handles the ``per_program`` consecutive tiles p * per_program, p * per_program + 1, ...
of the row-major grid of (XBLOCK, YBLOCK) tiles, and the launch has one program per such run.
The hardware starts programs in order, so the tiles in flight at any moment are one compact
stretch of memory. A persistent grid (one program per SM, tiles p, p + P, p + 2P, ...) was 3-4%
slower at 32768^2 on an H100 whatever the tile, depth or programs per SM (notes/tuning.md, "add").
"""

from __future__ import annotations

from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

# Registers move 16 bytes per thread per shared-memory access (ld/st.shared.v4).
VECTOR_BYTES = 16
THREADS_PER_WARP = 32


@gluon.jit
def tile_count(M, N, per_program, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr):
    """(tiles this program handles, tiles per row). The grid is cdiv(tiles, per_program), so
    every program has at least one."""
    tiles_y = gl.cdiv(N, YBLOCK)
    tiles = gl.cdiv(M, XBLOCK) * tiles_y
    first = gl.program_id(0) * per_program
    return gl.minimum(tiles - first, per_program), tiles_y


@gluon.jit
def tile_origin(i, tiles_y, per_program, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr):
    """Element coordinates of this program's i-th tile."""
    t = gl.program_id(0) * per_program + i
    return (t // tiles_y) * XBLOCK, (t % tiles_y) * YBLOCK


@gluon.jit
def load_tiles(
    a_desc, b_desc, a_bufs, b_bufs, ready, slot, i, count, tiles_y, per_program, XBLOCK: gl.constexpr, YBLOCK: gl.constexpr
):
    """Start the TMA loads of this program's i-th A and B tiles (if it has an i-th) into ``slot``;
    ready[slot] completes its phase when both have landed."""
    pred = i < count
    xoff, yoff = tile_origin(i, tiles_y, per_program, XBLOCK, YBLOCK)
    bar = ready.index(slot)
    mbarrier.expect(bar, a_desc.block_type.nbytes + b_desc.block_type.nbytes, pred=pred)
    tma.async_copy_global_to_shared(a_desc, [xoff, yoff], bar, a_bufs.index(slot), pred=pred)
    tma.async_copy_global_to_shared(b_desc, [xoff, yoff], bar, b_bufs.index(slot), pred=pred)


@gluon.jit
def take_tiles(a_bufs, b_bufs, ready, i, layout: gl.constexpr):
    """Wait until the i-th A and B tiles (slot i mod slots) have landed and load them into
    registers with ``layout``; returns (a, b, slot). The closing fence orders these generic-proxy
    reads before whatever TMA (async proxy) write refills the slot next."""
    slots: gl.constexpr = a_bufs.shape[0]
    slot = i % slots
    mbarrier.wait(ready.index(slot), (i // slots) & 1)
    a = a_bufs.index(slot).load(layout)
    b = b_bufs.index(slot).load(layout)
    fence_async_shared()
    return a, b, slot


def register_layout(itemsize: int, yblock: int, num_warps: int) -> Any:
    """Blocked layout for a tile in registers: 16-byte vectors along a row, a warp's threads
    across the row (32 consecutive vectors are conflict-free under any NVMMA swizzle, which
    permutes whole 16-byte chunks), warps stacked over rows."""
    vec = max(1, min(VECTOR_BYTES // itemsize, yblock))
    threads_y = min(THREADS_PER_WARP, yblock // vec)
    return gl.BlockedLayout([1, vec], [THREADS_PER_WARP // threads_y, threads_y], [num_warps, 1], [1, 0])
