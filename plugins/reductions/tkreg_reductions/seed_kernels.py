"""The tutorial's three block-pointer row sums, corrected.

Fixed relative to the seed text: block sizes are constexpr (``block_shape`` must be static, so a
whole row is padded to the next power of two), every load checks its bounds with zero padding,
the accumulator is fp32 and the result is cast to the input dtype on store, strides are the
tensor's own (strided and transposed inputs work), and names are defined.
"""

from __future__ import annotations

from typing import Any

import torch
import triton
import triton.language as tl

from tkreg.core.capability import Arch
from tkreg.launch.aot import AotSpec
from tkreg.launch.fastlaunch import Launcher
from tkreg.launch.inputs import fail_if
from tkreg.launch.tma import TRITON_TYPE

from .checks import MAX_BLOCK_ELEMENTS, default_block_m, next_power_of_2, validate, whole_row_reasons

WARP_ELEMENTS = 256  # whole-row kernels: one warp per 256 elements of the block, 1 to 16 warps


@triton.jit
def sum_row_kernel(X, Y, M, N, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_block = tl.make_block_ptr(
        base=X, shape=(M, N), strides=(stride_m, stride_n), offsets=(row, 0), block_shape=(1, BLOCK_N), order=(1, 0)
    )
    x = tl.load(x_block, boundary_check=(0, 1), padding_option="zero")
    total = tl.sum(x.to(tl.float32), axis=1)
    y_block = tl.make_block_ptr(base=Y, shape=(M,), strides=(1,), offsets=(row,), block_shape=(1,), order=(0,))
    tl.store(y_block, total.to(Y.dtype.element_ty), boundary_check=(0,))


@triton.jit
def sum_row_blocked_kernel(X, Y, M, N, stride_m, stride_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    first = tl.program_id(0) * BLOCK_M
    x_block = tl.make_block_ptr(
        base=X, shape=(M, N), strides=(stride_m, stride_n), offsets=(first, 0), block_shape=(BLOCK_M, BLOCK_N), order=(1, 0)
    )
    x = tl.load(x_block, boundary_check=(0, 1), padding_option="zero")
    total = tl.sum(x.to(tl.float32), axis=1)
    y_block = tl.make_block_ptr(base=Y, shape=(M,), strides=(1,), offsets=(first,), block_shape=(BLOCK_M,), order=(0,))
    tl.store(y_block, total.to(Y.dtype.element_ty), boundary_check=(0,))


@triton.jit
def sum_row_blocked_iterative_kernel(X, Y, M, N, stride_m, stride_n, BLOCK_N: tl.constexpr):
    row = tl.program_id(0)
    x_block = tl.make_block_ptr(
        base=X, shape=(M, N), strides=(stride_m, stride_n), offsets=(row, 0), block_shape=(1, BLOCK_N), order=(1, 0)
    )
    # Accumulate elementwise and reduce once at the end: independent adds, one tree reduction.
    # tl.full and a plain range, not tl.zeros and tl.cdiv: those are @jit helpers, and under the
    # interpreter each call costs about 0.4 ms per program (a third of this kernel's time there).
    acc = tl.full((1, BLOCK_N), 0.0, tl.float32)
    for _ in range(0, N, BLOCK_N):
        acc += tl.load(x_block, boundary_check=(0, 1), padding_option="zero").to(tl.float32)
        x_block = tl.advance(x_block, (0, BLOCK_N))
    total = tl.sum(acc, axis=1)
    y_block = tl.make_block_ptr(base=Y, shape=(M,), strides=(1,), offsets=(row,), block_shape=(1,), order=(0,))
    tl.store(y_block, total.to(Y.dtype.element_ty), boundary_check=(0,))


def _warps_for(block_elements: int) -> int:
    return max(1, min(16, block_elements // WARP_ELEMENTS))


# Launchers (tkreg.launch.fastlaunch) per kernel and block sizes: a few per process, keyed by the block
# sizes only (hashing a JITFunction hashes its source).
_WHOLE_ROW: dict[int, Launcher] = {}
_BLOCKED: dict[tuple[int, int], Launcher] = {}
_ITERATIVE: dict[int, Launcher] = {}


def sum_row(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """One row per program; the whole row is one block."""
    out = validate(x, out)
    m, n = x.shape
    block_n = next_power_of_2(n)
    if block_n > MAX_BLOCK_ELEMENTS:
        fail_if(whole_row_reasons("sum_row", 1, x))
    launch = _WHOLE_ROW.get(block_n)
    if launch is None:
        launch = _WHOLE_ROW[block_n] = Launcher(sum_row_kernel, BLOCK_N=block_n, num_warps=_warps_for(block_n))
    launch((m,), x, out, m, n, *x.stride())
    return out


def sum_row_blocked(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK_M: int | None = None) -> torch.Tensor:
    """BLOCK_M rows per program."""
    out = validate(x, out)
    m, n = x.shape
    block_n = next_power_of_2(n)
    if BLOCK_M is None:
        BLOCK_M = default_block_m(n)
    if BLOCK_M < 1 or BLOCK_M & (BLOCK_M - 1):
        raise ValueError(f"BLOCK_M must be a power of two >= 1, got {BLOCK_M}")
    if BLOCK_M * block_n > MAX_BLOCK_ELEMENTS:
        fail_if(whole_row_reasons("sum_row_blocked", BLOCK_M, x))
    launch = _BLOCKED.get((BLOCK_M, block_n))
    if launch is None:
        warps = _warps_for(BLOCK_M * block_n)
        launch = _BLOCKED[BLOCK_M, block_n] = Launcher(sum_row_blocked_kernel, BLOCK_M=BLOCK_M, BLOCK_N=block_n, num_warps=warps)
    launch((-(-m // BLOCK_M),), x, out, m, n, *x.stride())  # triton.cdiv costs microseconds on the host
    return out


def sum_row_blocked_iterative(x: torch.Tensor, out: torch.Tensor | None = None, BLOCK_N: int | None = None) -> torch.Tensor:
    """One row per program, walked in BLOCK_N steps with tl.advance; any row length."""
    out = validate(x, out)
    m, n = x.shape
    if BLOCK_N is None:
        BLOCK_N = min(next_power_of_2(n), 2048)
    if BLOCK_N < 1 or BLOCK_N & (BLOCK_N - 1):
        raise ValueError(f"BLOCK_N must be a power of two >= 1, got {BLOCK_N}")
    launch = _ITERATIVE.get(BLOCK_N)
    if launch is None:
        launch = _ITERATIVE[BLOCK_N] = Launcher(sum_row_blocked_iterative_kernel, BLOCK_N=BLOCK_N, num_warps=_warps_for(BLOCK_N))
    launch((m,), x, out, m, n, *x.stride())
    return out


# -- ahead-of-time compiles: the contiguous, 16-byte aligned case the JIT specializes most often --
AOT_N = 4096  # a representative row length for the whole-row kernels


def _signature(dtype: str, *constexprs: str) -> dict[str, str]:
    sig = {"X": f"*{TRITON_TYPE[dtype]}", "Y": f"*{TRITON_TYPE[dtype]}", "M": "i32", "N": "i32", "stride_m": "i32"}
    sig.update({name: "constexpr" for name in ("stride_n", *constexprs)})
    return sig


def _aot(fn: Any, dtype: str, constexprs: dict[str, int], num_warps: int) -> AotSpec:
    # stride_n == 1 is specialized to a constant by the JIT, as are 16-divisible sizes/pointers.
    return AotSpec(
        fn,
        _signature(dtype, *constexprs),
        {"stride_n": 1, **constexprs},
        {"num_warps": num_warps},
        aligned=("X", "Y", "N", "stride_m"),
    )


def aot_sum_row(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _aot(sum_row_kernel, dtype, {"BLOCK_N": AOT_N}, _warps_for(AOT_N))


def aot_sum_row_blocked(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    block_m = int(config.get("BLOCK_M", 1))
    return _aot(sum_row_blocked_kernel, dtype, {"BLOCK_M": block_m, "BLOCK_N": AOT_N}, _warps_for(block_m * AOT_N))


def aot_sum_row_blocked_iterative(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    block_n = int(config.get("BLOCK_N", 2048))
    return _aot(sum_row_blocked_iterative_kernel, dtype, {"BLOCK_N": block_n}, _warps_for(block_n))
