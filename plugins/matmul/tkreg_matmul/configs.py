"""Parameter sets for ``matmul_triton`` and the launcher's choice among them.

The candidates are the tile shapes Triton's matmul tutorial (03-matrix-multiplication.py, CUDA
autotune list) found best on A100/H100. The choice below is provisional until
``scripts/gpu/matmul_portable_check.py`` has timed them on an H100.
"""

from __future__ import annotations

from typing import Any

# Large tiles: the tutorial's best fp16 config on H100 and A100.
LARGE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
# Square tiles, for GPUs with less shared memory or outputs too small to fill the GPU with LARGE.
MEDIUM = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
# Small tiles: most programs, least shared memory (fits every capability >= 8.0).
SMALL = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
CANDIDATES = (LARGE, MEDIUM, SMALL)

# Under the CPU interpreter the cost is per program and per loop step, not per flop: big tiles.
INTERPRETER = {**MEDIUM, "num_stages": 1}

OPERAND_BYTES = 2  # fp16 / bf16


def describe(config: dict[str, Any]) -> str:
    """Short label: "128x256x64 w8 s3" (tile, warps, pipeline stages)."""
    tile = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return f"{tile} w{config['num_warps']} s{config['num_stages']}"


def shared_bytes(config: dict[str, Any]) -> int:
    """Shared memory the software pipeline holds: num_stages copies of an A and a B tile."""
    a_tile = config["BLOCK_M"] * config["BLOCK_K"]
    b_tile = config["BLOCK_K"] * config["BLOCK_N"]
    return (a_tile + b_tile) * OPERAND_BYTES * config["num_stages"]


def tiles(M: int, N: int, config: dict[str, Any]) -> int:
    return -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"])


def pick_config(M: int, N: int, K: int, device: Any) -> dict[str, Any]:
    """The largest candidate that fits the device's shared memory and still gives every SM at
    least one tile (fewer tiles than SMs leaves SMs idle); else the smallest that fits."""
    if getattr(device, "type", "cuda") != "cuda":
        return dict(INTERPRETER)
    import torch

    props = torch.cuda.get_device_properties(device)
    fitting = [c for c in CANDIDATES if shared_bytes(c) <= props.shared_memory_per_block_optin]
    for config in fitting:
        if tiles(M, N, config) >= props.multi_processor_count:
            return dict(config)
    return dict(fitting[-1] if fitting else SMALL)
