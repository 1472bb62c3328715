"""``sum_row_tiled``: a row sum that reads memory at bandwidth whatever the shape.

One kernel covers every shape, so lookup needs no shape-specific dispatch between kernels:

- Each program owns BLOCK_M rows and walks their columns in BLOCK_N steps, accumulating a
  (BLOCK_M, BLOCK_N) fp32 tile elementwise and reducing it once at the end: every step is one
  wide, coalesced load of BLOCK_M x BLOCK_N elements with no dependency on the previous step.
  Narrow rows (N = 32) get many rows per program, so each load is still tens of kilobytes.
- Full column blocks are loaded with only the row mask (constant along a row, so loads stay
  16 bytes wide); the ragged last block is a separate masked step.
- When there are too few row blocks to give every SM several programs (32 x 1048576), each row
  block is split into SPLIT column ranges; every program writes an fp32 partial sum, and a second
  tiny kernel adds the partials of each row in a fixed order. No atomics: the result is the same
  bit for bit from run to run.
- Rows the JIT cannot prove 16-byte aligned, where a row stride or the width is no multiple of 16
  elements (50257-wide vocabulary rows, a sliced view), would be loaded one element at a time (the
  masks and row starts are then element-aligned only). Such rows of an aligned tensor are read in
  the whole 16-byte vectors that hold them instead, from the boundary at or before each row's
  first element, with the neighbours' elements zeroed (``realigned_partial_sums_kernel``).

- A 16-bit row that one power-of-two block would pad by over a quarter (1100 wide in a 2048-wide
  block) is walked in narrower, pipelined steps instead, where the grid is large enough that every SM
  still gets a share of each step.

The launcher picks BLOCK_M, BLOCK_N, SPLIT and num_warps per shape (see ``choose_config``); the
choices were measured on an H100 and the padding limit on an H200, see notes/tuning.md.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import triton
import triton.language as tl

from tkreg.core import bounded
from tkreg.core.capability import Arch
from tkreg.launch.aot import AotSpec
from tkreg.launch.fastlaunch import Launcher
from tkreg.launch.tma import TRITON_TYPE

from .checks import next_power_of_2, validate

# Bytes one program loads per column step: enough independent 16-byte loads in flight per SM.
TILE_BYTES = 16384
# Widest column block: 16 KB of a row per step; wider rows take several steps, one row per
# program (H100, 2026-11-22: 16384^2 read at 3050 GB/s fp32 / 2960 bf16 this way,
# against 2750-2900 with 4 KB steps over 2-8 rows).
MAX_ROW_BYTES = 16384
# Programs per SM below which a shape is split across columns (several resident per SM).
PROGRAMS_PER_SM = 4
# Do not split unless a program would read at least this much: splitting adds a launch.
MIN_SPLIT_BYTES = 64 * 1024
MAX_SPLIT = 1024  # the second pass reduces all partials of a row in one block
PIPELINE_STAGES = 3  # column blocks in flight per program when a row takes several steps
# A row padded by more than this fraction of its width is walked in narrower blocks, of tiles of
# STEP_TILE_BYTES, where the grid covers MIN_STEP_ELEMENTS_PER_SM per SM a step (H200,
# 2026-11-30: 61008 x 1100 bf16 76 -> 50 us, 16384 x 5000 bf16 80 -> 56 us; see notes/tuning.md).
MAX_PADDING = 0.25
MIN_PADDED_BLOCK_N = 256
STEP_TILE_BYTES = 8192
MIN_STEP_ELEMENTS_PER_SM = 8192
# 16-bit rows only: fp32 rows read 0.996 of the one-step time over 20 shapes (faster above 250 MB,
# 6-9% slower at 24-98 MB), their 16 KB tiles holding half the elements a 16-bit tile does.
MAX_PADDING_LIMITED_ITEMSIZE = 2
VECTOR_BYTES = 16  # one ld.global.v4 per thread
MIN_REALIGNED_VECTORS = 2  # rows narrower than this many vectors are read element by element
JIT_DIVISIBILITY = 16  # triton specializes integer arguments that are multiples of this
VECTORS_PER_THREAD = 4  # loads in flight per thread per step
THREADS_PER_WARP = 32
MAX_WARPS = 16
DEFAULT_SMS = 132  # H100 SXM; used only where no GPU can be asked (the CPU interpreter)


@dataclass(frozen=True)
class TiledConfig:
    BLOCK_M: int
    BLOCK_N: int
    SPLIT: int
    num_warps: int
    NUM_STAGES: int = 1


@triton.jit
def partial_sums_kernel(
    X,
    P,
    M,
    N,
    stride_m,
    stride_n,
    cols_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    NUM_STAGES: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    col_start = tl.program_id(1) * cols_per_split
    col_end = tl.minimum(col_start + cols_per_split, N)
    cols = tl.arange(0, BLOCK_N)
    row_ptr = X + rows.to(tl.int64)[:, None] * stride_m
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    full_end = col_start + (col_end - col_start) // BLOCK_N * BLOCK_N
    # With NUM_STAGES > 1 triton pipelines the loop: later column blocks are already being copied
    # into shared memory (16-byte cp.async) while this one is added, so more bytes are in flight.
    for start in tl.range(col_start, full_end, BLOCK_N, num_stages=NUM_STAGES):
        ptrs = row_ptr + (start + cols)[None, :].to(tl.int64) * stride_n
        acc += tl.load(ptrs, mask=row_ok[:, None], other=0.0).to(tl.float32)
    if full_end < col_end:
        tail = full_end + cols
        ptrs = row_ptr + tail[None, :].to(tl.int64) * stride_n
        acc += tl.load(ptrs, mask=row_ok[:, None] & (tail < col_end)[None, :], other=0.0).to(tl.float32)
    total = tl.sum(acc, axis=1)
    if SPLIT == 1:
        tl.store(P + rows, total.to(P.dtype.element_ty), mask=row_ok)
    else:
        tl.store(P + rows * SPLIT + tl.program_id(1), total, mask=row_ok)


@triton.jit
def realigned_partial_sums_kernel(
    X,
    P,
    M,
    N,
    stride_m,
    stride_n,  # 1: taken so both kernels are called alike
    cols_per_split,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    SPLIT: tl.constexpr,
    NUM_STAGES: tl.constexpr,
    VEC: tl.constexpr,
):
    """partial_sums_kernel for contiguous rows it would read one element at a time (X itself
    16-byte aligned): rows that do not start on 16-byte boundaries (a row stride that is no
    multiple of VEC, the elements in 16 bytes), or of a width the JIT cannot prove a multiple of 16
    elements, which makes every masked block's loads element-wide.

    Each row is read in the whole 16-byte vectors that hold it: from the boundary at or before its
    first element (``lead`` elements before it) to the one after its last. Those vectors never
    reach past the 16-byte granules the row's own elements lie in, so every load stays inside
    memory the tensor's pages hold (a granule never straddles a page); the elements of the
    neighbouring rows or beyond the tensor that they bring are zeroed before they are added, in
    the range's first block and its last ones only. Column ranges count from the row's boundary
    (cols_per_split is a multiple of BLOCK_N, itself a multiple of VEC)."""
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    starts = rows.to(tl.int64) * stride_m
    leads = (starts % VEC).to(tl.int32)
    # The hints let triton prove 16-byte alignment: X is aligned, every row's vectors start on a
    # boundary and are whole, and split ranges start on boundaries.
    bases = X + tl.multiple_of(starts - leads, VEC)[:, None]
    ends = leads + N  # one past each row's last element, counted from its boundary
    spans = tl.multiple_of((ends + VEC - 1) // VEC * VEC, VEC)  # the vectors that hold the row
    lo = tl.multiple_of(tl.program_id(1) * cols_per_split, VEC)
    hi = lo + cols_per_split
    cols = tl.arange(0, BLOCK_N)
    # The range's first block, which holds the row's lead in the first split.
    offsets = lo + cols
    block = tl.load(bases + offsets[None, :], mask=row_ok[:, None] & (offsets[None, :] < spans[:, None]), other=0.0)
    inside = (offsets[None, :] >= leads[:, None]) & (offsets[None, :] < ends[:, None])
    acc = tl.where(inside, block.to(tl.float32), 0.0)
    # Blocks inside every row (past the lead, before N): only the row mask, constant along a row.
    middle = lo + BLOCK_N
    full_end = middle + tl.maximum(tl.minimum(hi, N) - middle, 0) // BLOCK_N * BLOCK_N
    for start in tl.range(middle, full_end, BLOCK_N, num_stages=NUM_STAGES):
        acc += tl.load(bases + (start + cols)[None, :], mask=row_ok[:, None], other=0.0).to(tl.float32)
    # The rest of the range (at most two blocks): whole vectors up to each row's span, then the
    # elements past the row's end zeroed.
    for start in tl.range(full_end, tl.minimum(hi, N + VEC - 1), BLOCK_N):
        offsets = start + cols
        block = tl.load(bases + offsets[None, :], mask=row_ok[:, None] & (offsets[None, :] < spans[:, None]), other=0.0)
        acc += tl.where(offsets[None, :] < ends[:, None], block.to(tl.float32), 0.0)
    total = tl.sum(acc, axis=1)
    if SPLIT == 1:
        tl.store(P + rows, total.to(P.dtype.element_ty), mask=row_ok)
    else:
        tl.store(P + rows * SPLIT + tl.program_id(1), total, mask=row_ok)


@triton.jit
def combine_kernel(P, Y, M, SPLIT: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_S: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    parts = tl.arange(0, BLOCK_S)
    mask = (rows < M)[:, None] & (parts < SPLIT)[None, :]
    partial = tl.load(P + rows[:, None] * SPLIT + parts[None, :], mask=mask, other=0.0)
    tl.store(Y + rows, tl.sum(partial, axis=1).to(Y.dtype.element_ty), mask=rows < M)


COMBINE_ROWS = 32


def cdiv(a: int, b: int) -> int:
    """Ceiling division on the host (triton.cdiv is a constexpr function: microseconds a call)."""
    return -(-a // b)


def _num_sms(x: torch.Tensor) -> int:
    return _sm_count(x.device.index) if x.device.type == "cuda" else DEFAULT_SMS


@functools.cache
def _sm_count(index: int | None) -> int:
    return torch.cuda.get_device_properties(index if index is not None else torch.cuda.current_device()).multi_processor_count


def choose_config(m: int, n: int, itemsize: int, num_sms: int) -> TiledConfig:
    """Tile and split for an (m, n) input; measured choices, see the module docstring."""
    widest = min(next_power_of_2(n), MAX_ROW_BYTES // itemsize)
    block_n, block_m = widest, _rows_per_program(m, n, widest, itemsize)
    narrower = _padding_limited(n, widest) if itemsize <= MAX_PADDING_LIMITED_ITEMSIZE else widest
    if narrower != widest:
        rows = _rows_per_program(m, n, narrower, itemsize)
        # Only where the grid still gives every SM enough of each step: with few programs a
        # row's steps, taken one after another, cost more than the padding they save.
        if cdiv(m, rows) * rows * narrower >= MIN_STEP_ELEMENTS_PER_SM * num_sms:
            block_n, block_m = narrower, rows
    multi_step = n > block_n
    row_blocks = cdiv(m, block_m)
    col_blocks = cdiv(n, block_n)
    split = 1
    bytes_per_row_block = block_m * n * itemsize
    if row_blocks < PROGRAMS_PER_SM * num_sms and bytes_per_row_block >= 2 * MIN_SPLIT_BYTES:
        want = cdiv(PROGRAMS_PER_SM * num_sms, row_blocks)
        split = min(want, col_blocks, MAX_SPLIT, bytes_per_row_block // MIN_SPLIT_BYTES)
    stages = PIPELINE_STAGES if multi_step else 1
    return TiledConfig(block_m, block_n, max(1, split), warps_for(block_m, block_n, itemsize), stages)


def _padding_limited(n: int, block_n: int) -> int:
    """The widest column block, at most ``block_n``, whose steps pad a row by at most
    MAX_PADDING of its width (a 1100-wide row: 256, not one 2048-wide block)."""
    while block_n > MIN_PADDED_BLOCK_N and cdiv(n, block_n) * block_n > n * (1 + MAX_PADDING):
        block_n //= 2
    return block_n


def _rows_per_program(m: int, n: int, block_n: int, itemsize: int) -> int:
    """Rows per program: a tile of TILE_BYTES when a row is one step; when it takes several, one
    row of the widest blocks, else (the narrower blocks of a padded row) a tile of STEP_TILE_BYTES."""
    if n <= block_n:
        tile_bytes = TILE_BYTES
    elif block_n * itemsize == MAX_ROW_BYTES:
        return 1
    else:
        tile_bytes = STEP_TILE_BYTES
    return max(1, min(next_power_of_2(m), tile_bytes // itemsize // block_n))


def warps_for(block_m: int, block_n: int, itemsize: int) -> int:
    """Enough threads that each holds a few 16-byte vectors of the tile, at most 16 warps."""
    vectors = max(1, block_m * block_n * itemsize // VECTOR_BYTES)
    return max(1, min(MAX_WARPS, vectors // (VECTORS_PER_THREAD * THREADS_PER_WARP)))


@dataclass(frozen=True)
class TiledPlan:
    """Everything sum_row_tiled derives from an input's shape and the parameters: the config,
    the column range per split, the grids and the launchers."""

    config: TiledConfig
    cols_per_split: int
    split: int
    grid: tuple[int, int]
    partial: Launcher
    combine: Launcher | None
    combine_grid: tuple[int]


# (M, N, itemsize, SMs, parameters) -> TiledPlan, oldest dropped first beyond PLANS entries.
PLANS = 1024
_PLANS: dict[tuple[Any, ...], TiledPlan] = {}
# tkreg.launch.fastlaunch launchers per constexprs and num_warps: a few per process.
_LAUNCHERS: dict[tuple[Any, ...], Launcher] = {}


_KERNELS = {"partial": partial_sums_kernel, "realigned": realigned_partial_sums_kernel, "combine": combine_kernel}


def _launcher(kernel_name: str, num_warps: int, **constexprs: int) -> Launcher:
    key = (kernel_name, num_warps, *constexprs.values())
    launch = _LAUNCHERS.get(key)
    if launch is None:
        launch = _LAUNCHERS[key] = Launcher(_KERNELS[kernel_name], **constexprs, num_warps=num_warps)
    return launch


def ragged_rows(x: torch.Tensor) -> bool:
    """Whether partial_sums_kernel would read x's rows one element at a time, where
    realigned_partial_sums_kernel can read them in 16-byte vectors: contiguous rows of a 16-byte
    aligned tensor that start off 16-byte boundaries or whose width is no multiple of 16."""
    stride_m, stride_n = x.stride()
    if stride_n != 1 or (stride_m * x.element_size() % VECTOR_BYTES == 0 and x.shape[1] % JIT_DIVISIBILITY == 0):
        return False
    return x.data_ptr() % VECTOR_BYTES == 0


def realigns(n: int, itemsize: int, block_n: int, ragged: bool) -> bool:
    """Whether ragged rows (:func:`ragged_rows`) are read in whole vectors: where rows are wide
    enough for whole vectors to carry most of the row, in blocks of whole vectors."""
    vec = VECTOR_BYTES // itemsize
    return ragged and n >= MIN_REALIGNED_VECTORS * vec and block_n % vec == 0


def plan(m: int, n: int, itemsize: int, num_sms: int, given: tuple[int | None, ...], ragged: bool = False) -> TiledPlan:
    """The plan for an (m, n) input; ``given``: BLOCK_M, BLOCK_N, SPLIT, num_warps, NUM_STAGES
    (None: choose); ``ragged``: :func:`ragged_rows` of the input. Cached; ValueError for
    parameters the kernel cannot take."""
    key = (m, n, itemsize, num_sms, ragged, *given)
    found = _PLANS.get(key)
    if found is not None:
        return found
    BLOCK_M, BLOCK_N, SPLIT, num_warps, NUM_STAGES = given
    chosen = choose_config(m, n, itemsize, num_sms)
    block_m, block_n = BLOCK_M or chosen.BLOCK_M, BLOCK_N or chosen.BLOCK_N
    # Warps follow the tile actually used, also when the caller forces the block sizes.
    warps = num_warps or (chosen.num_warps if (block_m, block_n) == (chosen.BLOCK_M, chosen.BLOCK_N) else None)
    config = TiledConfig(
        block_m,
        block_n,
        SPLIT or chosen.SPLIT,
        warps or warps_for(block_m, block_n, itemsize),
        NUM_STAGES or chosen.NUM_STAGES,
    )
    for name in ("BLOCK_M", "BLOCK_N"):
        value = getattr(config, name)
        if value < 1 or value & (value - 1):
            raise ValueError(f"{name} must be a power of two >= 1, got {value}")
    if not 1 <= config.SPLIT <= MAX_SPLIT:
        raise ValueError(f"SPLIT must be in 1..{MAX_SPLIT}, got {config.SPLIT}")
    # Column ranges are whole BLOCK_N blocks, so only the row's last range has a ragged tail. A
    # realigned row counts from the boundary before it: up to a vector less one element longer.
    vec = VECTOR_BYTES // itemsize
    realigned = realigns(n, itemsize, config.BLOCK_N, ragged)
    span = n + vec - 1 if realigned else n
    cols_per_split = cdiv(cdiv(span, config.SPLIT), config.BLOCK_N) * config.BLOCK_N
    split = cdiv(span, cols_per_split)
    shape = {"BLOCK_M": config.BLOCK_M, "BLOCK_N": config.BLOCK_N, "SPLIT": split, "NUM_STAGES": config.NUM_STAGES}
    if realigned:
        partial = _launcher("realigned", config.num_warps, **shape, VEC=vec)
    else:
        partial = _launcher("partial", config.num_warps, **shape)
    combine = None
    if split > 1:
        combine = _launcher("combine", 4, SPLIT=split, BLOCK_M=COMBINE_ROWS, BLOCK_S=next_power_of_2(split))
    found = TiledPlan(
        config, cols_per_split, split, (cdiv(m, config.BLOCK_M), split), partial, combine, (cdiv(m, COMBINE_ROWS),)
    )
    return bounded.put(_PLANS, key, found, PLANS)


def sum_row_tiled(
    x: torch.Tensor,
    out: torch.Tensor | None = None,
    BLOCK_M: int | None = None,
    BLOCK_N: int | None = None,
    SPLIT: int | None = None,
    num_warps: int | None = None,
    NUM_STAGES: int | None = None,
) -> torch.Tensor:
    out = validate(x, out)
    m, n = x.shape
    p = plan(m, n, x.element_size(), _num_sms(x), (BLOCK_M, BLOCK_N, SPLIT, num_warps, NUM_STAGES), ragged_rows(x))
    target = out if p.split == 1 else torch.empty(m * p.split, dtype=torch.float32, device=x.device)
    p.partial(p.grid, x, target, m, n, *x.stride(), p.cols_per_split)
    if p.combine is not None:
        p.combine(p.combine_grid, target, out, m)
    return out


def aot_sum_row_tiled(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The contiguous, 16-byte aligned case, at the config given (or 65536 x 1024's). With
    ``{"REALIGNED": 1}``: rows whose starts are off 16-byte boundaries (a row stride and a width
    that are multiples of nothing), which realigned_partial_sums_kernel reads."""
    itemsize = 4 if dtype == "float32" else 2
    chosen = choose_config(65536, 1024, itemsize, DEFAULT_SMS)
    block_m = int(config.get("BLOCK_M", chosen.BLOCK_M))
    block_n = int(config.get("BLOCK_N", chosen.BLOCK_N))
    split = int(config.get("SPLIT", 1))
    realigned = bool(config.get("REALIGNED", 0))
    ptr = f"*{TRITON_TYPE[dtype]}"
    signature = {
        "X": ptr,
        "P": ptr if split == 1 else "*fp32",
        "M": "i32",
        "N": "i32",
        "stride_m": "i32",
        "stride_n": "constexpr",
        "cols_per_split": "i32",
        "BLOCK_M": "constexpr",
        "BLOCK_N": "constexpr",
        "SPLIT": "constexpr",
        "NUM_STAGES": "constexpr",
    }
    stages = int(config.get("NUM_STAGES", 1))
    constexprs = {"stride_n": 1, "BLOCK_M": block_m, "BLOCK_N": block_n, "SPLIT": split, "NUM_STAGES": stages}
    num_warps = int(config.get("num_warps", warps_for(block_m, block_n, itemsize)))
    if realigned:
        signature["VEC"] = "constexpr"
        constexprs["VEC"] = VECTOR_BYTES // itemsize
    return AotSpec(
        realigned_partial_sums_kernel if realigned else partial_sums_kernel,
        signature,
        constexprs,
        {"num_warps": num_warps},
        aligned=("X", "P", "M", "cols_per_split") if realigned else ("X", "P", "M", "N", "stride_m", "cols_per_split"),
    )
