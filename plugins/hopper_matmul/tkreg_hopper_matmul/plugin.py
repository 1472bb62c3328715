"""Hook implementation: registers ``matmul_hopper_ws`` (no torch, no triton here)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from tkreg_matmul.layouts import LAYOUTS

import tkreg

from .config import DEFAULT, REGISTERED, HopperConfig

# Keys always shown in test ids; others appear only where they differ from the default.
SHOWN = ("BLOCK_M", "BLOCK_N", "NUM_STAGES", "CONSUMERS", "PINGPONG", "EPILOGUE_SPLIT")
SCHEDULER_NAMES = ("persistent", "grouped-1", "grouped-8")  # the schedulers plugin's, for compile items


def _shown(config: HopperConfig) -> dict[str, int | bool]:
    default = asdict(DEFAULT)
    return {key: value for key, value in asdict(config).items() if key in SHOWN or value != default[key]}


def _compile_configs() -> tuple[dict[str, int | bool | str], ...]:
    """Compile items: the default in both B layouts with every scheduler; every other registered
    config once per layout, schedulers taken in turn (each is compiled with all of them by the
    plugin's own tests of the default); then the bias epilogue ("bias": True) of every config
    without split-K in both layouts (split-K gives its bias to the reduce kernel: its own compile
    is the one above)."""
    items: list[dict[str, int | bool | str]] = []
    for layout in LAYOUTS:
        items += [{**_shown(DEFAULT), "b_layout": layout, "scheduler": s} for s in SCHEDULER_NAMES]
        for i, config in enumerate(REGISTERED[1:]):
            items.append({**_shown(config), "b_layout": layout, "scheduler": SCHEDULER_NAMES[i % len(SCHEDULER_NAMES)]})
    for layout in LAYOUTS:
        unsplit = [c for c in REGISTERED if c.SPLIT_K == 1]
        for i, config in enumerate(unsplit):
            items.append({**_shown(config), "b_layout": layout, "scheduler": SCHEDULER_NAMES[i % len(SCHEDULER_NAMES)],
                          "bias": True})  # fmt: skip
    return tuple(items)


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
        # A bias must be a contiguous (N,) vector of the operands' dtype (the epilogue loads it).
        inputs="tkreg_matmul.checks:gluon_bias_matmul_inputs_reasons",
    ),
    interpretable=False,
    targets=(
        tkreg.CompileTarget(
            "sm_90a",
            ptx=(
                r"wgmma\.mma_async\.sync\.aligned\.m64n(?:32|64|128|256)k16\.f32\.b?f16",
                r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global",
                r"cp\.async\.bulk\.tensor\.[23]d\.global\.shared::cta",
                r"setmaxnreg\.dec",
            ),
            # The widest wgmma for the tile (N = BLOCK_N), TMA loads and stores (3-D into a split-K
            # workspace).
            sass=(r"HGMMA\.64x(?:32|64|128|256)x16\.F32", r"UTMALDG", r"UTMASTG"),
        ),
    ),
    aot="tkreg_hopper_matmul.launch:aot",
    configs=tuple(_shown(c) for c in REGISTERED),
    # Benchmarks time what a user gets: the launcher's own choice of config and scheduler.
    bench_configs=({},),
    # tkreg.ops times these beside the launcher's own choice when it tunes a shape on a GPU.
    tune_configs="tkreg_hopper_matmul.choice:tune_configs",
    compile_configs=_compile_configs(),
    takes_scheduler=True,
    # Above the portable Triton matmul: on an H100 this is the kernel to run.
    priority=10,
    description="persistent warp-specialized wgmma matmul: TMA ring fed by one producer warp, one or two "
    "consumer warpgroups (cooperative or ping-pong), B as (K, N) or as an (N, K) weight read as stored, "
    "an optional bias (N,) added in fp32 in the epilogue, split-K for few output tiles, tile and scheduler "
    "chosen per shape from measurements",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[tkreg.Kernel], None]) -> None:
    register(KERNEL)
