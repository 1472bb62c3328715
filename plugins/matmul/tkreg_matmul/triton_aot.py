"""Ahead-of-time compile of ``matmul_triton`` for the compile items: the kernel the launcher runs on
contiguous inputs whose sizes are multiples of 16 (the benchmark shapes), with the same
specialization the JIT makes (unit strides become constants, other ints and pointers divisible by 16)."""

from __future__ import annotations

from typing import Any

from tkreg.aot import AotSpec
from tkreg.capability import Arch
from tkreg.tma import TRITON_TYPE

from .configs import LARGE
from .triton_kernel import matmul_kernel

# The JIT turns an int argument equal to 1 into a constant; contiguous inputs have these unit strides.
UNIT_STRIDES = ("stride_ak", "stride_bn", "stride_cn")
SIZES = ("M", "N", "K", "stride_am", "stride_bk", "stride_cm")
POINTERS = ("a_ptr", "b_ptr", "c_ptr")
BLOCKS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


def matmul_triton_aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    params = {**LARGE, **config}
    pointer = f"*{TRITON_TYPE[dtype]}"
    signature = {p: pointer for p in POINTERS} | {s: "i32" for s in SIZES}
    signature |= {s: "constexpr" for s in (*UNIT_STRIDES, *BLOCKS, "UPCAST")}
    constexprs: dict[str, Any] = {s: 1 for s in UNIT_STRIDES} | {b: params[b] for b in BLOCKS} | {"UPCAST": False}
    options = {"num_warps": params["num_warps"], "num_stages": params["num_stages"]}
    return AotSpec(matmul_kernel, signature, constexprs, options, aligned=(*POINTERS, *SIZES))
