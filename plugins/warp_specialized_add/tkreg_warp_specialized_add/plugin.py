"""Registers ``add_warp_specialized``. Imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

from tkreg_elementwise.tma_specs import tma_requirements, tma_targets

import tkreg
from tkreg import Kernel

_MOD = "tkreg_warp_specialized_add.add_ws"
SEED_TILE = {"XBLOCK": 32, "YBLOCK": 64}

ADD_WARP_SPECIALIZED = Kernel(
    name="add_warp_specialized",
    op="add",
    launcher=f"{_MOD}:add_warp_specialized",
    requires=tma_requirements("warp_specialization", "setmaxnreg"),
    interpretable=False,
    # setmaxnreg: the partitions' register budgets (24 for the 1-warp load and store workers).
    targets=tma_targets(ptx=(r"setmaxnreg\.dec\.sync\.aligned\.u32\s+24;",), sass=(r"USETMAXREG",)),
    aot=f"{_MOD}:aot",
    configs=(
        {},  # the per-dtype default (16 KB tiles of 256 columns, runs of 3 tiles, 3 load and 2 store slots)
        # The seed's benchmark setting: 64 x 128 fp32 tiles, 3 load and 1 store slots (swizzled, long runs).
        {"XBLOCK": 64, "YBLOCK": 128, "num_load_buffers": 3, "num_store_buffers": 1, "tiles_per_program": 16, "swizzle": 128},
        # The seed's tests: 32 x 64 blocks, (1, 1) and (2, 2) buffers, 4 and 8 compute warps; runs of
        # one tile, of 7 (a shorter last run) and of 1000 (slots reused many times).
        *(
            {**SEED_TILE, "num_load_buffers": nb, "num_store_buffers": nb, "num_warps": warps, "tiles_per_program": per}
            for nb, per in ((1, 1), (2, 7), (2, 1000))
            for warps in (4, 8)
        ),
    ),
    bench_configs=({},),
    # Between add_tma (as fast on an H100, simpler) and the portable add_triton (0.5% slower at
    # 32768^2; notes/tuning.md, "add").
    priority=25,
    description="Gluon add: warp-specialized (1-warp TMA load, compute, 1-warp TMA store) over mbarriers",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(ADD_WARP_SPECIALIZED)
