"""Ahead-of-time compile of ``matmul_triton`` and ``matmul_triton_batched`` for the compile items:
the kernel the launcher runs on row-major A and C with B in either layout (``b_layout`` "kn" or "nk"
in the config, default "kn") whose sizes are multiples of 16 (the benchmark shapes), with the same
specialization the JIT makes (unit strides become constants, other ints and pointers divisible by
16) and the launcher's ALIGN=8 for 16-byte loads; the batched kernel also has a stride per batch.
Without a bias (the default) ``bias_ptr`` is the constexpr None the launcher's None becomes;
``"bias": True`` in the config compiles the bias epilogue (a 16-byte aligned (N,) vector)."""

from __future__ import annotations

from typing import Any

from tkreg.core.capability import Arch
from tkreg.launch.aot import AotSpec
from tkreg.launch.tma import TRITON_TYPE

from .batched import batched_matmul_kernel
from .configs import LARGE
from .layouts import KN, LAYOUTS, NK
from .triton_kernel import VECTOR, matmul_kernel

# The JIT turns an int argument equal to 1 into a constant; row-major A and C, and B's contiguous
# dimension, have unit strides.
UNIT_STRIDES = {KN: ("stride_ak", "stride_bn", "stride_cn"), NK: ("stride_ak", "stride_bk", "stride_cn")}
SIZES = ("M", "N", "K", "stride_am", "stride_cm")
POINTERS = ("a_ptr", "b_ptr", "c_ptr")
BIAS = "bias_ptr"
BLOCKS = ("BLOCK_M", "BLOCK_N", "BLOCK_K", "GROUP_M")


BATCH_STRIDES = ("stride_ab", "stride_bb", "stride_cb")


def matmul_triton_aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _spec(matmul_kernel, dtype, config, ())


def matmul_triton_batched_aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _spec(batched_matmul_kernel, dtype, config, BATCH_STRIDES)


def _spec(kernel: Any, dtype: str, config: dict[str, Any], batch_strides: tuple[str, ...]) -> AotSpec:
    params = {**LARGE, **config}
    layout = params.pop("b_layout", KN)
    with_bias = bool(params.pop("bias", False))
    if layout not in LAYOUTS:
        raise ValueError(f"b_layout={layout!r}; known: {', '.join(LAYOUTS)}")
    unit = UNIT_STRIDES[layout]
    b_stride = "stride_bn" if layout == NK else "stride_bk"
    sizes = (*SIZES, b_stride, *batch_strides)
    pointer = f"*{TRITON_TYPE[dtype]}"
    pointers = (*POINTERS, BIAS) if with_bias else POINTERS
    signature = {p: pointer for p in pointers} | {s: "i32" for s in sizes}
    signature |= {s: "constexpr" for s in (*unit, *BLOCKS, "UPCAST", "ALIGN", "B_NK")}
    constexprs: dict[str, Any] = {s: 1 for s in unit} | {b: params[b] for b in BLOCKS}
    constexprs |= {"UPCAST": False, "ALIGN": VECTOR, "B_NK": layout == NK}
    if not with_bias:
        signature[BIAS] = "constexpr"
        constexprs[BIAS] = None
    options = {"num_warps": params["num_warps"], "num_stages": params["num_stages"]}
    return AotSpec(kernel, signature, constexprs, options, aligned=(*pointers, *sizes))
