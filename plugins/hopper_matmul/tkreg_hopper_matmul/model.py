"""A time model of ``matmul_hopper_ws`` on an H100: what the launcher uses where no measured shape is
near (and what the GPU suite uses to decide which configs are worth timing). Pure Python.

Per program (one per SM), the work is ``rounds`` units of ``k_per`` ring steps each (a unit: one
output tile, or one K slice of it with split-K). One step moves (rows of A actually in the matrix +
BLOCK_N columns of B) x BLOCK_K elements from L2 into shared memory and runs 2 BLOCK_M BLOCK_N
BLOCK_K flops of wgmma; the step takes the longer of the two:

    t_step = max(flops / SM_FLOPS, bytes / SM_L2_BYTES)

Two constants fit the three tiles measured on the H100 (2026-11-22, 4096^3 bf16, do_bench, ratios to the
128x256 tile): SM_FLOPS is where the 128x256 tile (11.7 bytes per kFLOP) runs, compute-bound;
SM_L2_BYTES is what makes 128x128 (15.6 B/kFLOP) reach 0.87 of it and 64x128 (23.4 B/kFLOP) 0.60
(measured 0.87 and 0.60). A unit ends with its epilogue (the tile through shared memory to a TMA
store, at SM_EPILOGUE_BYTES), during which that SM's tensor cores idle.

The whole launch cannot be faster than reading A and B once and writing C (and, with split-K, the
fp32 workspace) at DRAM_BYTES; split-K adds the reduction kernel (a launch and its traffic).
Time = max(program, DRAM) + reduction, each with a fixed start-up latency.

The scheduler is not modelled: L2 reuse across units depends on it, and grouped-8 measured best or
within 2% of the best on every shape of the Llama-3-8B projection suite; the measured table decides where it is not.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .config import HopperConfig, effective_split_k, k_steps

SM_FLOPS = 5.3e12  # FLOP/s per SM: 700 TFLOP/s (128x256 tile at 4096^3..8192^3) over 132 SMs
SM_L2_BYTES = 73e9  # bytes/s per SM from L2 into shared memory (fit to the 128x128 and 64x128 tiles)
SM_EPILOGUE_BYTES = 150e9  # bytes/s per SM of registers -> shared memory -> TMA store
DRAM_BYTES = 2.8e12  # bytes/s of streaming reads and writes (a 2 GiB device copy measured 3.02e12)
START_S = 1.5e-6  # launch to first wgmma: the first TMA round trip to DRAM
UNIT_S = 0.2e-6  # per unit: barrier hand-offs and the accumulator drain before the epilogue
REDUCE_START_S = 2.0e-6  # the split-K reduction kernel's launch and first loads
WORKSPACE_ITEMSIZE = 4


@dataclass(frozen=True)
class Estimate:
    seconds: float
    program_seconds: float  # the SMs' share alone: among DRAM-bound candidates, less is more slack
    units: int
    rounds: int
    split_k: int
    bound: str  # "sm" (tensor cores or L2 feed) or "dram"

    def describe(self) -> str:
        return f"{self.seconds * 1e6:.1f} us est. ({self.units} units in {self.rounds} rounds, {self.bound}-bound)"


def estimate(M: int, N: int, K: int, config: HopperConfig, num_sms: int, itemsize: int = 2) -> Estimate:
    """Modelled device time of C = A @ B with ``config`` on a GPU with ``num_sms`` SMs."""
    split_k = effective_split_k(K, config)
    tiles = -(-M // config.BLOCK_M) * -(-N // config.BLOCK_N)
    units = tiles * split_k
    programs = min(num_sms, units)
    rounds = -(-units // programs)
    steps = -(-k_steps(K, config) // split_k)
    rows = min(M, config.BLOCK_M)  # rows past M are TMA zero fill: no traffic
    cols = min(N, config.BLOCK_N)
    flops = 2 * config.BLOCK_M * config.BLOCK_N * config.BLOCK_K
    step_bytes = (rows + cols) * config.BLOCK_K * itemsize
    t_step = max(flops / SM_FLOPS, step_bytes / SM_L2_BYTES)
    out_itemsize = WORKSPACE_ITEMSIZE if split_k > 1 else itemsize
    t_unit = steps * t_step + rows * cols * out_itemsize / SM_EPILOGUE_BYTES + UNIT_S
    t_program = START_S + rounds * t_unit
    dram = (M * K + K * N) * itemsize + M * N * out_itemsize * split_k
    t_dram = START_S + dram / DRAM_BYTES
    seconds = max(t_program, t_dram)
    if split_k > 1:
        seconds += REDUCE_START_S + (split_k * M * N * WORKSPACE_ITEMSIZE + M * N * itemsize) / DRAM_BYTES
    return Estimate(seconds, t_program, units, rounds, split_k, "sm" if t_program >= t_dram else "dram")


# K slices the model tries for each tile (effective_split_k trims them to what K allows).
SPLITS = (1, 2, 3, 4, 6, 8, 12, 16)


def candidates(tiles: tuple[HopperConfig, ...], K: int) -> list[HopperConfig]:
    """Every tile with every useful K split that it can build (split-K stages fp32 in the epilogue,
    which some tiles have no shared memory for); splits trimmed by K are listed once."""
    out: list[HopperConfig] = []
    for tile in tiles:
        seen = set()
        for split in SPLITS:
            config = replace(tile, SPLIT_K=split)
            effective = effective_split_k(K, config)
            if effective in seen:
                continue
            config = replace(tile, SPLIT_K=effective)
            if config.problems():
                continue
            seen.add(effective)
            out.append(config)
    return out


def ranked(M: int, N: int, K: int, tiles: tuple[HopperConfig, ...], num_sms: int) -> list[tuple[Estimate, HopperConfig]]:
    """Every candidate, fastest estimate first; among equal estimates (DRAM-bound ones), the one
    whose SMs have the most slack, then the one computing fewer padding rows past M, then the order
    of ``tiles``, fewer splits first."""
    scored = [(estimate(M, N, K, c, num_sms), i, c) for i, c in enumerate(candidates(tiles, K))]
    scored.sort(key=lambda s: (round(s[0].seconds, 9), s[0].program_seconds, -(-M // s[2].BLOCK_M) * s[2].BLOCK_M - M, s[1]))
    return [(e, c) for e, _, c in scored]
