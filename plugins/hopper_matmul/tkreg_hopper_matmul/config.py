"""The kernel's parameters as one validated value, the resources they take on an H100, and the
launcher's choice of parameters for a problem size. Pure Python: no torch, no triton.

The parameters (names as the launcher takes them):

- ``BLOCK_M`` x ``BLOCK_N``: the output tile one step of the persistent loop computes;
  ``BLOCK_K``: the depth of one stage of the shared-memory ring.
- ``CONSUMERS``: consumer warpgroups (each runs wgmma on a ``ROWS x BLOCK_N`` fp32 accumulator held
  in its registers). Cooperative (``PINGPONG=False``): the consumers split each tile's rows and read
  the same B stage. Ping-pong (``PINGPONG=True``): each consumer owns whole tiles (tile t goes to
  consumer t % CONSUMERS), so one consumer's epilogue overlaps another's main loop.
- ``NUM_STAGES``: stages in the ring the producer warp fills with TMA.
- ``EPILOGUE_SPLIT``: the epilogue stores each consumer's block in this many column slices through
  one staging buffer of ``ROWS x BLOCK_N / EPILOGUE_SPLIT``, trading a wait per slice for shared
  memory (which buys a deeper ring).
- ``PRODUCER_REGS``: registers per thread the producer warp keeps (setmaxnreg); the consumers get
  what is left of the register file.
- ``SPLIT_K``: slices of K per output tile, each its own work unit storing an fp32 partial sum into a
  workspace that a second kernel adds up in a fixed order (1: no split, the tile is stored directly).
  It gives problems with fewer output tiles than SMs (decode and short prefill) work for every SM.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

from tkreg import InputError

# H100 (compute capability 9.0) limits, from the CUDA C++ Programming Guide's table of technical
# specifications per compute capability.
SMEM_PER_BLOCK = 227 * 1024  # bytes of shared memory one block may use (opt-in maximum)
REGISTERS_PER_SM = 64 * 1024  # 32-bit registers in one SM's register file
THREADS_PER_WARPGROUP = 128
# setmaxnreg (PTX ISA 8.0) takes a multiple of 8 in [24, 256].
SETMAXNREG_MIN, SETMAXNREG_MAX, SETMAXNREG_STEP = 24, 256, 8

# wgmma: a warpgroup's M is a multiple of 64; N a multiple of 8 up to 256 (PTX ISA, wgmma.mma_async).
WGMMA_M = 64
WGMMA_MAX_N = 256
# A consumer's accumulator must leave room for its other values: at most 128 fp32 registers per
# thread (a 64 x 256 or 128 x 128 block), which the compiled kernels hold without spilling.
MAX_ACC_REGS = 128
# Shared memory besides the ring and the staging buffers: mbarriers and allocator alignment (the
# compiled 3-stage 128x256x64 kernel needs 192 bytes more than its buffers).
SMEM_SLACK = 1024

# Sizes the kernel is built for: powers of two (the epilogue halves BLOCK_N).
BLOCK_SIZES = {"BLOCK_M": (64, 128, 256), "BLOCK_N": (32, 64, 128, 256), "BLOCK_K": (32, 64, 128)}
EPILOGUE_SPLITS = (1, 2, 4)
# Three consumers make 16 warps, which caps every thread at 128 registers (the compiler sizes the
# kernel for an even share); ptxas then cannot allocate a 64x256 wgmma (it asks for 154).
MAX_CONSUMERS = 2
MAX_SPLIT_K = 32
WORKSPACE_ITEMSIZE = 4  # split-K partial sums are fp32


@dataclass(frozen=True)
class HopperConfig:
    BLOCK_M: int = 128
    BLOCK_N: int = 256
    BLOCK_K: int = 64
    NUM_STAGES: int = 3
    CONSUMERS: int = 2
    PINGPONG: bool = False
    EPILOGUE_SPLIT: int = 1
    PRODUCER_REGS: int = 24
    SPLIT_K: int = 1

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> HopperConfig:
        """A config from launcher keyword arguments (missing keys take the defaults); InputError
        for unknown keys or values the kernel cannot build."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(params) - known)
        if unknown:
            raise InputError(f"unknown parameter(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        config = cls(**params)
        problems = config.problems()
        if problems:
            raise InputError(f"invalid matmul_hopper_ws config {config.params()}: " + "; ".join(problems))
        return config

    def params(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def rows(self) -> int:
        """Rows of the output block one consumer warpgroup accumulates."""
        return self.BLOCK_M if self.PINGPONG else self.BLOCK_M // self.CONSUMERS

    @property
    def a_blocks(self) -> int:
        """A blocks (ROWS x BLOCK_K) per ring stage: one per consumer when they share a stage."""
        return 1 if self.PINGPONG else self.CONSUMERS

    @property
    def acc_regs(self) -> int:
        return self.rows * self.BLOCK_N // THREADS_PER_WARPGROUP

    @property
    def consumer_regs(self) -> int:
        """Registers per thread for each consumer warpgroup: the register file less the producer's
        warpgroup (a 1-warp partition still takes a warpgroup's slot), shared evenly."""
        per_thread = REGISTERS_PER_SM // THREADS_PER_WARPGROUP - self.PRODUCER_REGS
        regs = per_thread // self.CONSUMERS // SETMAXNREG_STEP * SETMAXNREG_STEP
        return min(regs, SETMAXNREG_MAX)

    def out_itemsize(self, itemsize: int) -> int:
        """Bytes per element the epilogue stages: the output's, or fp32 partial sums with split-K."""
        return WORKSPACE_ITEMSIZE if self.SPLIT_K > 1 else itemsize

    def smem_bytes(self, itemsize: int) -> int:
        ring = self.NUM_STAGES * (self.a_blocks * self.rows * self.BLOCK_K + self.BLOCK_K * self.BLOCK_N)
        staging = self.CONSUMERS * self.rows * (self.BLOCK_N // self.EPILOGUE_SPLIT)
        return ring * itemsize + staging * self.out_itemsize(itemsize) + SMEM_SLACK

    def problems(self, itemsize: int = 2) -> list[str]:
        """Why this config cannot be built (empty: it can)."""
        out = []
        for name, sizes in BLOCK_SIZES.items():
            if getattr(self, name) not in sizes:
                out.append(f"{name}={getattr(self, name)} must be one of {sizes}")
        if not 1 <= self.CONSUMERS <= MAX_CONSUMERS:
            out.append(f"CONSUMERS={self.CONSUMERS} must be 1..{MAX_CONSUMERS}")
        if self.PINGPONG and self.CONSUMERS < 2:
            out.append("PINGPONG needs CONSUMERS >= 2 (one consumer has nobody to alternate with)")
        if self.EPILOGUE_SPLIT not in EPILOGUE_SPLITS:
            out.append(f"EPILOGUE_SPLIT={self.EPILOGUE_SPLIT} must be one of {EPILOGUE_SPLITS}")
        if self.NUM_STAGES < 2:
            out.append(f"NUM_STAGES={self.NUM_STAGES} must be >= 2 (one stage loading while one computes)")
        if self.PRODUCER_REGS % SETMAXNREG_STEP or not SETMAXNREG_MIN <= self.PRODUCER_REGS <= SETMAXNREG_MAX:
            out.append(
                f"PRODUCER_REGS={self.PRODUCER_REGS} must be a multiple of {SETMAXNREG_STEP} in "
                f"[{SETMAXNREG_MIN}, {SETMAXNREG_MAX}]"
            )
        if not 1 <= self.SPLIT_K <= MAX_SPLIT_K:
            out.append(f"SPLIT_K={self.SPLIT_K} must be 1..{MAX_SPLIT_K}")
        if out:
            return out
        if self.BLOCK_M % self.CONSUMERS or self.rows % WGMMA_M:
            out.append(
                f"each consumer's rows ({self.BLOCK_M} / {1 if self.PINGPONG else self.CONSUMERS}) "
                f"must be a multiple of {WGMMA_M} (wgmma's M)"
            )
        if self.BLOCK_N > WGMMA_MAX_N:
            out.append(f"BLOCK_N={self.BLOCK_N} exceeds wgmma's largest N ({WGMMA_MAX_N})")
        if self.acc_regs > MAX_ACC_REGS:
            out.append(
                f"a {self.rows}x{self.BLOCK_N} fp32 accumulator takes {self.acc_regs} registers per thread; "
                f"at most {MAX_ACC_REGS}"
            )
        if self.consumer_regs < self.acc_regs + SETMAXNREG_MIN:
            out.append(
                f"{self.CONSUMERS} consumers get {self.consumer_regs} registers each, too few for a "
                f"{self.acc_regs}-register accumulator"
            )
        smem = self.smem_bytes(itemsize)
        if smem > SMEM_PER_BLOCK:
            out.append(f"needs about {smem} bytes of shared memory; an H100 block has {SMEM_PER_BLOCK}")
        return out


def tiles(M: int, N: int, config: HopperConfig) -> int:
    return -(-M // config.BLOCK_M) * -(-N // config.BLOCK_N)


# The tiles the launcher chooses among (each with any K split, see .model.candidates), and the
# registered configs: every tile, plus split-K configs that exercise the workspace path.
DEFAULT = HopperConfig()
TILES = (
    # Large problems: the 128x256 tile reads the fewest operand bytes per flop (48 KB of A and B per
    # 4.2 MFLOP stage); a 4-stage ring pays for itself with a two-slice epilogue; 256x128 gives each
    # consumer 128 rows.
    DEFAULT,
    HopperConfig(NUM_STAGES=4, EPILOGUE_SPLIT=2),
    HopperConfig(BLOCK_M=256, BLOCK_N=128, NUM_STAGES=4, EPILOGUE_SPLIT=2),
    # Fewer, smaller tiles: more units for the SMs when the output is small.
    HopperConfig(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4),
    HopperConfig(BLOCK_M=128, BLOCK_N=64, BLOCK_K=128, NUM_STAGES=4),
    HopperConfig(BLOCK_M=128, BLOCK_N=32, BLOCK_K=128, NUM_STAGES=5),
    # M <= 64 (decode): one consumer warpgroup of 64 rows (wgmma's M); narrow tiles and deep rings
    # keep every SM streaming B, the operand that is read once.
    HopperConfig(BLOCK_M=64, BLOCK_N=256, NUM_STAGES=4, CONSUMERS=1),
    HopperConfig(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=4, CONSUMERS=1),
    HopperConfig(BLOCK_M=64, BLOCK_N=64, BLOCK_K=128, NUM_STAGES=6, CONSUMERS=1),
    HopperConfig(BLOCK_M=64, BLOCK_N=32, BLOCK_K=128, NUM_STAGES=8, CONSUMERS=1),
)
PINGPONG = HopperConfig(BLOCK_M=64, NUM_STAGES=4, PINGPONG=True)
# Split-K configs for the tests: a slice count that divides K's steps, an odd one that leaves the
# last slice short, and the cooperative and ping-pong consumers on the workspace path.
SPLIT_CONFIGS = (
    HopperConfig(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=4, CONSUMERS=1, SPLIT_K=4),
    HopperConfig(BLOCK_M=128, BLOCK_N=128, NUM_STAGES=4, SPLIT_K=3),
    HopperConfig(BLOCK_M=64, BLOCK_N=128, NUM_STAGES=4, PINGPONG=True, SPLIT_K=2),
)
REGISTERED = (*TILES, PINGPONG, *SPLIT_CONFIGS)


def k_steps(K: int, config: HopperConfig) -> int:
    return -(-K // config.BLOCK_K)


def effective_split_k(K: int, config: HopperConfig) -> int:
    """The K slices actually launched: each of the SPLIT_K slices gets ceil(steps / SPLIT_K) steps,
    and only as many slices as it takes to cover K (every slice then starts inside K; the last one
    may end past it, where TMA reads zeros). Never more slices than K steps."""
    steps = k_steps(K, config)
    per_slice = -(-steps // min(config.SPLIT_K, steps))
    return -(-steps // per_slice)
