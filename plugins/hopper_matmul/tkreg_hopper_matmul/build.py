"""What the launcher and the ahead-of-time compile share: the TMA block shapes, constexprs and compile
options of one config, so the AOT compile builds exactly the kernel the launcher runs."""

from __future__ import annotations

from typing import Any

from .config import HopperConfig
from .kernel import CONSUMER_WARPS


def blocks(config: HopperConfig) -> dict[str, Any]:
    """Keyword arguments for tkreg_matmul.gluon_common's matmul_descriptors / descriptor_signatures:
    A blocks are one consumer's rows, C blocks one epilogue slice of them."""
    return {
        "BLOCK_M": config.rows,
        "BLOCK_N": config.BLOCK_N,
        "BLOCK_K": config.BLOCK_K,
        "c_block": [config.rows, config.BLOCK_N // config.EPILOGUE_SPLIT],
    }


def constexprs(config: HopperConfig, scheduler_impl: Any) -> dict[str, Any]:
    return {
        "SchedulerImpl": scheduler_impl,
        "BLOCK_M": config.BLOCK_M,
        "NUM_STAGES": config.NUM_STAGES,
        "CONSUMERS": config.CONSUMERS,
        "PINGPONG": config.PINGPONG,
        "EPILOGUE_SPLIT": config.EPILOGUE_SPLIT,
        "CONSUMER_REGS": config.consumer_regs,
        "PRODUCER_REGS": config.PRODUCER_REGS,
    }


def options() -> dict[str, Any]:
    # The kernel's own warps are the first consumer warpgroup.
    return {"num_warps": CONSUMER_WARPS.value}
