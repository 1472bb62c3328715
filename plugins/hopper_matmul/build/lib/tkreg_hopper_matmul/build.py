"""What the launcher and the ahead-of-time compile share: the TMA block shapes, constexprs and compile
options of one config and B layout, so the AOT compile builds exactly the kernel the launcher runs."""

from __future__ import annotations

from typing import Any

from tkreg_matmul.layouts import NK

from .config import HopperConfig
from .kernel import CONSUMER_WARPS


def blocks(config: HopperConfig, b_layout: str) -> dict[str, list[int]]:
    """TMA block shapes: A blocks are one consumer's rows; B blocks BLOCK_K x BLOCK_N, or BLOCK_N x
    BLOCK_K when B is the transpose of an (N, K) weight; C blocks one epilogue slice of a consumer's
    rows, with a leading 1 for the (SPLIT_K, M, N) split-K workspace."""
    b = [config.BLOCK_N, config.BLOCK_K] if b_layout == NK else [config.BLOCK_K, config.BLOCK_N]
    c = [config.rows, config.BLOCK_N // config.EPILOGUE_SPLIT]
    return {"a": [config.rows, config.BLOCK_K], "b": b, "c": [1, *c] if config.SPLIT_K > 1 else c}


def constexprs(config: HopperConfig, scheduler_impl: Any, b_layout: str) -> dict[str, Any]:
    return {
        "SchedulerImpl": scheduler_impl,
        "BLOCK_M": config.BLOCK_M,
        "NUM_STAGES": config.NUM_STAGES,
        "CONSUMERS": config.CONSUMERS,
        "PINGPONG": config.PINGPONG,
        "EPILOGUE_SPLIT": config.EPILOGUE_SPLIT,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.PRODUCER_REGS,
        "B_NK": b_layout == NK,
    }


def options() -> dict[str, Any]:
    # The kernel's own warps are the first consumer warpgroup.
    return {"num_warps": CONSUMER_WARPS.value}
