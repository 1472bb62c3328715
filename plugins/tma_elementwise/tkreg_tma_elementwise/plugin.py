"""Registers ``add_tma``. Imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

from tkreg_elementwise.tma_specs import tma_requirements, tma_targets

import tkreg
from tkreg import Kernel

_MOD = "tkreg_tma_elementwise.add_tma"
# The 04-tma tutorial's test blocks (32 x 64) with 1 and 2 slots leave partial tiles on the
# seeds' shapes; the last config runs two smaller programs per SM.
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
        {},  # the per-dtype default (16 x 256 tiles, 4 fp32 / 8 16-bit load slots, 2 store slots)
        {"XBLOCK": 64, "YBLOCK": 128, "num_buffers": 3, "num_store_buffers": 1, "num_warps": 4},  # the first default
        {**SEED_TILE, "num_buffers": 1, "num_store_buffers": 1, "num_warps": 4},
        {**SEED_TILE, "num_buffers": 2, "num_store_buffers": 2, "num_warps": 4},
        {**SEED_TILE, "num_buffers": 4, "num_store_buffers": 2, "num_warps": 8, "ctas_per_sm": 2},
    ),
    bench_configs=({},),
    # Ranked by measurement (H100, 2026-11-22, BENCHMARKS.md): below the portable add_triton,
    # which matches torch.add; about 4% slower at 32768^2 and far slower on small inputs.
    priority=10,
    description="Gluon add: persistent, multi-buffered TMA loads on mbarriers, pipelined TMA stores",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(ADD_TMA)
