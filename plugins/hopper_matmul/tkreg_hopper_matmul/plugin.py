"""Hook implementation: registers ``matmul_hopper_ws`` (no torch, no triton here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, replace

import tkreg

from .config import CANDIDATES, DEFAULT, HopperConfig

# Keys always shown in test ids; others appear only where they differ from the default.
SHOWN = ("BLOCK_M", "BLOCK_N", "NUM_STAGES", "CONSUMERS", "PINGPONG", "EPILOGUE_SPLIT")

# The two alternatives to the default that the H100 sweep decides between: a deeper ring paid for
# with a two-slice epilogue, and ping-pong consumers (one's epilogue under the other's main loop).
DEEP_RING = replace(DEFAULT, NUM_STAGES=4, EPILOGUE_SPLIT=2)
PINGPONG = replace(DEFAULT, BLOCK_M=64, NUM_STAGES=4, PINGPONG=True)


def _shown(config: HopperConfig) -> dict[str, int | bool]:
    default = asdict(DEFAULT)
    return {key: value for key, value in asdict(config).items() if key in SHOWN or value != default[key]}


KERNEL = tkreg.Kernel(
    name="matmul_hopper_ws",
    op="matmul",
    launcher="tkreg_hopper_matmul.launch:matmul_hopper_ws",
    requires=tkreg.Requirements(
        arch="sm_90a",
        # Written against triton 3.6.0's Gluon (list-form warp_specialize, aggregates with
        # constexpr_function __init__); not checked on other versions.
        triton=">=3.6,<3.7",
        features=("tma", "mbarrier", "wgmma", "warp_specialization", "setmaxnreg"),
        dtypes=("float16", "bfloat16"),
        inputs="tkreg_matmul.checks:gluon_matmul_inputs_reasons",
    ),
    interpretable=False,
    targets=(
        tkreg.CompileTarget(
            "sm_90a",
            ptx=(
                r"wgmma\.mma_async\.sync\.aligned\.m64n(?:128|256)k16\.f32\.b?f16",
                r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global",
                r"cp\.async\.bulk\.tensor\.2d\.global\.shared::cta",
                r"setmaxnreg\.dec",
            ),
            # The widest wgmma for the tile (N = BLOCK_N), TMA loads and stores.
            sass=(r"HGMMA\.64x(?:128|256)x16\.F32", r"UTMALDG", r"UTMASTG"),
        ),
    ),
    aot="tkreg_hopper_matmul.launch:aot",
    configs=tuple(_shown(c) for c in (*CANDIDATES[:1], DEEP_RING, PINGPONG, *CANDIDATES[1:])),
    bench_configs=(_shown(DEFAULT), _shown(DEEP_RING), _shown(PINGPONG)),
    takes_scheduler=True,
    # Above the portable Triton matmul: on an H100 this is the kernel to run.
    priority=10,
    description="persistent warp-specialized wgmma matmul: TMA ring fed by one producer warp, "
    "two consumer warpgroups (cooperative or ping-pong), TMA-store epilogue overlapping the next tile",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[tkreg.Kernel], None]) -> None:
    register(KERNEL)
