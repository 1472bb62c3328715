"""Parameter sets for ``matmul_triton`` and the launcher's shape-aware choice among them.

The candidates are the tile shapes of Triton's matmul tutorial (03-matrix-multiplication.py, CUDA
autotune list) plus two narrow-M tiles for decode-like problems. The choice, as for the Hopper kernel
(tkreg_hopper_matmul.choice), takes the measured table ``triton_choice.json`` where a suite shape is
near (measured on a GPU; notes/tuning.md, "Tables built from measurements") and otherwise the model below:

    time = max(waves x per-program time, DRAM time) + START_S

A program computes one BLOCK_M x BLOCK_N tile over K; ``occupancy`` programs share an SM (as many as
its shared memory holds, at most MAX_OCCUPANCY), so a wave is SMs x occupancy programs and each
runs at 1/occupancy of the SM's rate. The SM's rate for a config is the lower of its tensor-core
issue rate (a warpgroup of 4 warps issues less than two: MMA_FLOPS) and what L2 feeds it for the
tile's bytes per flop (SM_L2_BYTES): with the 8192^3 bf16 figures of 2026-11-22 (H100) (640, 435, 277 TFLOP/s for
128x256 w8, 128x128 w4, 64x64 w4) the model gives 640, 435 and 309.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from .choice_table import Table, packaged_table

# Large tiles: the tutorial's best fp16 config on H100 and A100.
LARGE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3}
# Square tiles, for GPUs with less shared memory or outputs too small to fill the GPU with LARGE.
MEDIUM = {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
# Small tiles: most programs, least shared memory (fits every capability >= 8.0).
SMALL = {"BLOCK_M": 64, "BLOCK_N": 64, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4}
# Decode-like problems (few rows, long K): 16 rows waste no tensor-core rows, long K steps keep loads
# in flight.
DECODE = {"BLOCK_M": 16, "BLOCK_N": 64, "BLOCK_K": 256, "GROUP_M": 8, "num_warps": 4, "num_stages": 3}
CANDIDATES = (
    LARGE,
    {"BLOCK_M": 256, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 3},
    MEDIUM,
    {"BLOCK_M": 128, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 8, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 256, "BLOCK_K": 32, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 128, "BLOCK_N": 64, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    {"BLOCK_M": 64, "BLOCK_N": 128, "BLOCK_K": 64, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    SMALL,
    {"BLOCK_M": 32, "BLOCK_N": 64, "BLOCK_K": 128, "GROUP_M": 8, "num_warps": 4, "num_stages": 4},
    DECODE,
)

# Under the CPU interpreter the cost is per program and per loop step, not per flop: big tiles.
INTERPRETER = {**MEDIUM, "num_stages": 1}

OPERAND_BYTES = 2  # fp16 / bf16
TABLE_FILE = "triton_choice.json"
TABLE_KIND = "triton_choice"
NEAR = 0.75  # as tkreg_hopper_matmul.choice: table distance within which a measured shape applies
MODEL_MARGIN = 0.15

# Model constants (H100, see the module docstring).
MMA_FLOPS = {4: 3.3e12, 8: 4.85e12}  # FLOP/s per SM one program's warps issue (1 or 2 warpgroups)
SM_L2_BYTES = 73e9  # bytes/s per SM from L2 (the Hopper kernel's model fits the same)
DRAM_BYTES = 2.8e12
START_S = 2e-6
MAX_OCCUPANCY = 4
SMEM_PER_SM = 228 * 1024  # H100: shared memory per SM (227 KB per block)


def describe(config: Mapping[str, Any]) -> str:
    """Short label: "128x256x64 w8 s3" (tile, warps, pipeline stages)."""
    tile = "x".join(str(config[k]) for k in ("BLOCK_M", "BLOCK_N", "BLOCK_K"))
    return f"{tile} w{config['num_warps']} s{config['num_stages']}"


def shared_bytes(config: Mapping[str, Any]) -> int:
    """Shared memory the software pipeline holds: num_stages copies of an A and a B tile."""
    a_tile = config["BLOCK_M"] * config["BLOCK_K"]
    b_tile = config["BLOCK_K"] * config["BLOCK_N"]
    return (a_tile + b_tile) * OPERAND_BYTES * config["num_stages"]


def tiles(M: int, N: int, config: Mapping[str, Any]) -> int:
    return -(-M // config["BLOCK_M"]) * -(-N // config["BLOCK_N"])


def estimate(M: int, N: int, K: int, config: Mapping[str, Any], num_sms: int, smem_per_sm: int = SMEM_PER_SM) -> float:
    """Modelled seconds of one launch (see the module docstring); ``smem_per_sm`` sets how many
    programs share an SM."""
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    occupancy = max(1, min(MAX_OCCUPANCY, smem_per_sm // shared_bytes(config)))
    rows, cols = min(M, bm), min(N, bn)
    bytes_per_flop = (rows + cols) * OPERAND_BYTES / (2 * bm * bn)
    sm_rate = min(MMA_FLOPS.get(config["num_warps"], MMA_FLOPS[4]), SM_L2_BYTES / bytes_per_flop)
    waves = -(-tiles(M, N, config) // (num_sms * occupancy))
    per_program = 2 * bm * bn * (-(-K // config["BLOCK_K"]) * config["BLOCK_K"]) * occupancy / sm_rate
    dram = (M * K + K * N + M * N) * OPERAND_BYTES / DRAM_BYTES
    return START_S + max(waves * per_program, dram)


def fitting(smem_per_block: int) -> list[dict[str, Any]]:
    return [dict(c) for c in CANDIDATES if shared_bytes(c) <= smem_per_block]


def model_pick(M: int, N: int, K: int, num_sms: int, smem_per_block: int) -> dict[str, Any]:
    """The fitting candidate with the lowest estimate (ties: listed first); SMALL if none fits."""
    options = fitting(smem_per_block)
    if not options:
        return dict(SMALL)
    return min(options, key=lambda c: estimate(M, N, K, c, num_sms, smem_per_block))


def table() -> Table:
    return packaged_table("tkreg_matmul", TABLE_FILE, TABLE_KIND)


def choose_from(
    table: Table, M: int, N: int, K: int, layout: str, num_sms: int, smem_per_block: int
) -> tuple[dict[str, Any], str]:
    """(config, why): the measured config of the nearest suite shape where near enough and not
    estimated MODEL_MARGIN slower than the model's pick here; else the model's pick."""
    best = model_pick(M, N, K, num_sms, smem_per_block)
    near = table.nearest(M, N, K, layout)
    if near is None or near[1] > NEAR:
        return best, "model"
    if set(near[0].params) != set(LARGE) or shared_bytes(near[0].params) > smem_per_block:
        return best, f"model (the table's entry for {near[0].shape} does not fit this kernel or GPU)"
    entry, distance = near
    measured = f"measured best at {entry.shape} ({table.provenance()})"
    if distance == 0:
        return dict(entry.params), measured
    theirs = estimate(M, N, K, entry.params, num_sms, smem_per_block)
    if theirs > (1 + MODEL_MARGIN) * estimate(M, N, K, best, num_sms, smem_per_block):
        return best, f"model (the {measured} is estimated slower here)"
    return dict(entry.params), f"{measured}, distance {distance:.2f}"


@functools.lru_cache(maxsize=4096)
def _choose_cached(M: int, N: int, K: int, layout: str, num_sms: int, smem_per_block: int) -> tuple[tuple[str, Any], ...]:
    config, _ = choose_from(table(), M, N, K, layout, num_sms, smem_per_block)
    return tuple(config.items())


def choose(M: int, N: int, K: int, layout: str, num_sms: int, smem_per_block: int = SMEM_PER_SM - 1024) -> dict[str, Any]:
    """The launcher's config for these sizes and B layout on a GPU with these limits (default: an
    H100's 227 KB per block), from the packaged table and the model; cached per shape."""
    return dict(_choose_cached(M, N, K, layout, num_sms, smem_per_block))


@functools.cache
def _device_limits(index: int) -> tuple[int, int]:
    import torch

    props = torch.cuda.get_device_properties(index)
    return props.multi_processor_count, props.shared_memory_per_block_optin


def pick_config(M: int, N: int, K: int, device: Any, layout: str = "kn") -> dict[str, Any]:
    """The launcher's config for these sizes and B layout on ``device`` (the interpreter's on CPU)."""
    if getattr(device, "type", "cuda") != "cuda":
        return dict(INTERPRETER)
    index = device.index if getattr(device, "index", None) is not None else _current_device()
    num_sms, smem = _device_limits(index)
    return choose(M, N, K, layout, num_sms, smem)


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()
