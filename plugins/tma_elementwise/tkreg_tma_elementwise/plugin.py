"""Registers ``add_tma``. Imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

from tkreg_elementwise.tma_specs import tma_requirements, tma_targets

import tkreg
from tkreg import Kernel

_MOD = "tkreg_tma_elementwise.add_tma"
# The 04-tma tutorial's test blocks (32 x 64) with 1 and 2 slots leave partial tiles on the
# seeds' shapes. The registered configs also cover the swizzled layout, a run length that leaves
# the last program a shorter run (7), and runs far longer than the slot count (slots reused,
# mbarrier phases flipping many times).
SEED_TILE = {"XBLOCK": 32, "YBLOCK": 64}

ADD_TMA = Kernel(
    name="add_tma",
    op="add",
    launcher=f"{_MOD}:add_tma",
    requires=tma_requirements(),
    interpretable=False,
    targets=tma_targets(),
    aot=f"{_MOD}:aot",
    configs=(
        {},  # the per-dtype default (16 KB tiles of 256 columns, runs of 3 tiles, 3 load and 2 store slots)
        # the first default: 64 x 128 tiles, 3 slots, swizzled, long runs
        {"XBLOCK": 64, "YBLOCK": 128, "num_buffers": 3, "num_store_buffers": 1, "tiles_per_program": 16, "swizzle": 128},
        {**SEED_TILE, "num_buffers": 1, "num_store_buffers": 1, "tiles_per_program": 1, "swizzle": 128},
        {**SEED_TILE, "num_buffers": 2, "num_store_buffers": 2, "tiles_per_program": 7, "swizzle": 0},
        {**SEED_TILE, "num_buffers": 4, "num_store_buffers": 2, "num_warps": 8, "tiles_per_program": 1000, "swizzle": 0},
    ),
    bench_configs=({},),
    # First in lookup: on an H100 it reads at or above torch.add's speed at 32768^2 while the
    # portable add_triton stays 0.5% below (notes/tuning.md, "add"); add_warp_specialized is as
    # fast, with more moving parts. Small inputs are another story: see BENCHMARKS.md.
    priority=30,
    description="Gluon add: multi-buffered TMA loads on mbarriers, pipelined TMA stores",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(ADD_TMA)
