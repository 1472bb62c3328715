"""``add_triton``: the portable add kernel (plain Triton; any CUDA GPU and the CPU interpreter).

Two paths: when a, b and out are all contiguous the add is one flat pass over numel elements,
in full unmasked blocks (so the loads vectorize to 16-byte accesses) and one masked tail block;
any other layout goes through a 2-D tiled kernel that takes every tensor's strides.

Why exact: the sum is one IEEE add. Triton may compute 16-bit adds in float32 and round once more
to the output type; that double rounding is harmless because float32's 24-bit significand is at
least 2p + 2 for p = 11 (fp16) and 8 (bf16) (Figueroa, "When is double rounding innocuous?", 1995),
so the result is the correctly rounded sum the harness compares with, bit for bit.

triton 3.6's CPU interpreter keeps bfloat16 as raw 16-bit words and adds them as integers, and its
float32 -> bfloat16 conversion rounds ties away from zero; under the interpreter bfloat16 is
therefore added in float32 and rounded to nearest-even by hand (BF16_BY_HAND), so the
interpreter checks the same bit-exact answer the GPU gives. GPU builds keep the native add.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from tkreg.launch.aot import AotSpec
from tkreg.launch.fastlaunch import Launcher, is_compiled
from tkreg.launch.tma import TRITON_TYPE

from .add_checks import checked_output

# Launch parameters. BLOCK elements per program; provisional values from the tutorials' vector
# add (1024 to 4096 per program), settled on the H100 (notes/tuning.md, "add").
LARGE_CONFIG: dict[str, int] = {"BLOCK": 4096, "num_warps": 8}
SMALL_CONFIG: dict[str, int] = {"BLOCK": 1024, "num_warps": 4}
# Below this many elements a 4096-element block leaves fewer than ~8 programs per SM of an H100
# (132 SMs): latency hiding needs more, smaller programs.
SMALL_NUMEL = 1 << 22
# The 2-D (strided) path's tile is at most this wide; the rest of BLOCK goes to rows.
MAX_TILE_COLS = 128


# float32 -> bfloat16 round-to-nearest-even on the bits: add half an ulp of the result (0x7FFF)
# plus the kept part's lowest bit (ties to even), then drop the low 16 bits. Finite and inf only.
BF16_HALF_ULP_MINUS_ONE = 0x7FFF


@triton.jit
def _sum(a, b, BF16_BY_HAND: tl.constexpr):
    if BF16_BY_HAND:
        bits = (a.to(tl.float32) + b.to(tl.float32)).to(tl.uint32, bitcast=True)
        bits += BF16_HALF_ULP_MINUS_ONE + ((bits >> 16) & 1)
        total = (bits >> 16).to(tl.uint16).to(tl.bfloat16, bitcast=True)
    else:
        total = a + b
    return total


@triton.jit
def add_contiguous_kernel(a_ptr, b_ptr, c_ptr, numel, BLOCK: tl.constexpr, BF16_BY_HAND: tl.constexpr):
    # int64 block start: numel may exceed 2**31; offsets inside a block stay int32.
    start = tl.program_id(0).to(tl.int64) * BLOCK
    offs = tl.arange(0, BLOCK)
    a_ptr += start
    b_ptr += start
    c_ptr += start
    if start + BLOCK <= numel:
        # Full block: no mask, so 16-byte vector loads and stores.
        tl.store(c_ptr + offs, _sum(tl.load(a_ptr + offs), tl.load(b_ptr + offs), BF16_BY_HAND))
    else:
        mask = offs < numel - start
        total = _sum(tl.load(a_ptr + offs, mask=mask), tl.load(b_ptr + offs, mask=mask), BF16_BY_HAND)
        tl.store(c_ptr + offs, total, mask=mask)


@triton.jit
def add_strided_kernel(
    a_ptr,
    b_ptr,
    c_ptr,
    M,
    N,
    stride_am,
    stride_an,
    stride_bm,
    stride_bn,
    stride_cm,
    stride_cn,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BF16_BY_HAND: tl.constexpr,
):
    # A 1-D grid over tiles, row-major: the grid's y and z dimensions are limited to 65535.
    pid = tl.program_id(0)
    tiles_n = tl.cdiv(N, BLOCK_N)
    rows = (pid // tiles_n) * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = (pid % tiles_n) * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    # int64 offsets: a strided tensor may span more than 2**31 elements.
    r = rows.to(tl.int64)[:, None]
    c = cols.to(tl.int64)[None, :]
    a = tl.load(a_ptr + r * stride_am + c * stride_an, mask=mask)
    b = tl.load(b_ptr + r * stride_bm + c * stride_bn, mask=mask)
    tl.store(c_ptr + r * stride_cm + c * stride_cn, _sum(a, b, BF16_BY_HAND), mask=mask)


def choose_config(numel: int) -> dict[str, int]:
    """Launch parameters for ``numel`` elements when the caller gives none."""
    return dict(SMALL_CONFIG if numel < SMALL_NUMEL else LARGE_CONFIG)


def tile_shape(block: int, n: int) -> tuple[int, int]:
    """(BLOCK_M, BLOCK_N) of the strided path: as wide as the rows allow, up to MAX_TILE_COLS.
    Integer arithmetic: triton.next_power_of_2 and triton.cdiv cost microseconds per host call."""
    cols = min(1 << (n - 1).bit_length(), MAX_TILE_COLS, block)
    return block // cols, cols


# Launchers (tkreg.launch.fastlaunch) per path and (blocks, num_warps, BF16_BY_HAND): a handful per
# process. Keyed by plain values: hashing a JITFunction hashes its source.
_CONTIGUOUS: dict[tuple[int, int, bool], Launcher] = {}
_STRIDED: dict[tuple[int, int, int, bool], Launcher] = {}


def _contiguous_launcher(block: int, warps: int, by_hand: bool) -> Launcher:
    launch = _CONTIGUOUS.get((block, warps, by_hand))
    if launch is None:
        launch = Launcher(add_contiguous_kernel, BLOCK=block, BF16_BY_HAND=by_hand, num_warps=warps)
        _CONTIGUOUS[block, warps, by_hand] = launch
    return launch


def _strided_launcher(block_m: int, block_n: int, warps: int, by_hand: bool) -> Launcher:
    launch = _STRIDED.get((block_m, block_n, warps, by_hand))
    if launch is None:
        launch = Launcher(add_strided_kernel, BLOCK_M=block_m, BLOCK_N=block_n, BF16_BY_HAND=by_hand, num_warps=warps)
        _STRIDED[block_m, block_n, warps, by_hand] = launch
    return launch


def add_triton(a: Any, b: Any, out: Any = None, *, BLOCK: int | None = None, num_warps: int | None = None) -> Any:
    """out = a + b for 2-D float32/float16/bfloat16 tensors of one shape, any strides."""
    out = checked_output(a, b, out, interpretable=True)
    numel = a.numel()
    if BLOCK is None and num_warps is None:
        block, warps = DEFAULT_SMALL if numel < SMALL_NUMEL else DEFAULT_LARGE
    else:
        config = {**choose_config(numel), **{k: v for k, v in (("BLOCK", BLOCK), ("num_warps", num_warps)) if v is not None}}
        block, warps = _checked_config(config)
    # Only an interpreted kernel needs bfloat16 rounded by hand (module docstring).
    by_hand = a.dtype is torch.bfloat16 and not is_compiled(add_contiguous_kernel)
    if a.is_contiguous() and b.is_contiguous() and out.is_contiguous():
        _contiguous_launcher(block, warps, by_hand)(((numel + block - 1) // block,), a, b, out, numel)
        return out
    m, n = a.shape
    block_m, block_n = tile_shape(block, n)
    grid = (-(-m // block_m) * -(-n // block_n),)
    _strided_launcher(block_m, block_n, warps, by_hand)(grid, a, b, out, m, n, *a.stride(), *b.stride(), *out.stride())
    return out


def _checked_config(config: dict[str, int]) -> tuple[int, int]:
    block, warps = config["BLOCK"], config["num_warps"]
    if not isinstance(block, int) or block < 1 or block & (block - 1):
        raise ValueError(f"add_triton: BLOCK must be a power of two, got {block!r}")
    if warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"add_triton: num_warps must be a power of two up to 32, got {warps!r}")
    return block, warps


# (BLOCK, num_warps) when the caller gives neither, checked once.
DEFAULT_SMALL = _checked_config(SMALL_CONFIG)
DEFAULT_LARGE = _checked_config(LARGE_CONFIG)


def aot(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The contiguous path (what every contiguous input, the benchmarks' included, runs) for a
    large input, with the specializations the JIT makes for torch tensors: 16-byte aligned
    pointers and a numel divisible by 16."""
    block, warps = _checked_config({**LARGE_CONFIG, **config})
    ptr = f"*{TRITON_TYPE[dtype]}"
    return AotSpec(
        fn=add_contiguous_kernel,
        signature={"a_ptr": ptr, "b_ptr": ptr, "c_ptr": ptr, "numel": "i32", "BLOCK": "constexpr", "BF16_BY_HAND": "constexpr"},
        constexprs={"BLOCK": block, "BF16_BY_HAND": False},
        options={"num_warps": warps},
        aligned=("a_ptr", "b_ptr", "c_ptr", "numel"),
    )
