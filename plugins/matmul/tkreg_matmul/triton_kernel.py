"""``matmul_triton``: a portable ``tl.dot`` matmul for any shape and strides (masked loads and
stores, 64-bit row offsets), grouped launch order for L2 reuse, fp32 accumulation, and an optional
bias (N,) added to the fp32 accumulator before the one rounding to the output dtype, as cuBLAS's
bias epilogue does for ``F.linear``. Runs on any CUDA GPU with capability >= 8.0 (bf16 tensor cores)
and under the Triton CPU interpreter. B may be row-major (K, N), the transposed view of an (N, K)
weight, or anything strided. Without a bias the kernel gets None, which triton specializes as a
constant: that kernel has no bias code at all.

Vector loads: the JIT marks an integer argument divisible by 16 only when it is, so with N = 5000
(B's row stride) it knows nothing and loads B one element at a time. Where every size and stride the
loads depend on is a multiple of 8 elements (16 bytes), the launcher says so with ``ALIGN=8`` and
the kernel rebuilds those values as ``(x // ALIGN) * ALIGN``, equal to x, whose divisibility the
compiler can see: 16-byte loads and masks that stay constant over them.

Set ``TRITON_INTERPRET=1`` before importing this module to run it on the CPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

from tkreg.launch.fastlaunch import Launcher
from tkreg.launch.inputs import device_reasons, fail_if, interpreter_active

from .checks import bias_reasons, operand_reasons
from .configs import pick_config
from .gluon_common import ShapeClassCache
from .layouts import KN, NK, b_layout
from .output import output_for


@triton.jit
def matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr, ALIGN: tl.constexpr, B_NK: tl.constexpr,
):  # fmt: skip
    matmul_tile(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                tl.program_id(0), BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, UPCAST, ALIGN, B_NK)  # fmt: skip


@triton.jit
def matmul_tile(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, pid,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr, ALIGN: tl.constexpr, B_NK: tl.constexpr,
):  # fmt: skip
    """Tile ``pid`` (in grouped order) of C = A @ B (+ bias, a contiguous (N,) vector, unless
    ``bias_ptr`` is None); inlined into each kernel that launches it."""
    if ALIGN > 1:
        # The launcher checked these are multiples of ALIGN (A and C row-major, B's unit stride the
        # one B_NK says): the same values, with a divisibility the compiler can see.
        N = (N // ALIGN) * ALIGN
        K = (K // ALIGN) * ALIGN
        stride_am = (stride_am // ALIGN) * ALIGN
        stride_cm = (stride_cm // ALIGN) * ALIGN
        if B_NK:
            stride_bn = (stride_bn // ALIGN) * ALIGN
        else:
            stride_bk = (stride_bk // ALIGN) * ALIGN
    # Grouped order: GROUP_M rows of tiles walked column by column, so consecutive programs share
    # B columns and A rows in L2.
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    num_pid_in_group = GROUP_M * num_pid_n
    first_pid_m = (pid // num_pid_in_group) * GROUP_M
    rows = tl.minimum(num_pid_m - first_pid_m, GROUP_M)
    local = pid % num_pid_in_group
    pid_m = first_pid_m + local % rows
    pid_n = local // rows

    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    mask_m = offs_m[:, None] < M
    mask_n = offs_n[None, :] < N
    # 64-bit row offsets: M * stride_am can pass 2^31 elements on large inputs.
    a_ptrs = a_ptr + offs_m[:, None].to(tl.int64) * stride_am + offs_k[None, :] * stride_ak
    b_ptrs = b_ptr + offs_k[:, None].to(tl.int64) * stride_bk + offs_n[None, :] * stride_bn
    step_a = BLOCK_K * tl.cast(stride_ak, tl.int64)
    step_b = BLOCK_K * tl.cast(stride_bk, tl.int64)

    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        k_left = K - k * BLOCK_K
        # Masked K tail reads zeros, which add nothing to the sum.
        a = tl.load(a_ptrs, mask=mask_m & (offs_k[None, :] < k_left), other=0.0)
        b = tl.load(b_ptrs, mask=(offs_k[:, None] < k_left) & mask_n, other=0.0)
        if UPCAST:
            # Interpreter only: it keeps bf16 as raw uint16 and its dot would multiply the bit
            # patterns, and its fp16 dot takes numpy's slow non-BLAS path. fp32 operands hold fp16
            # and bf16 values exactly, so this is the same fp32 accumulation of exact products.
            acc = tl.dot(a.to(tl.float32), b.to(tl.float32), acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
        a_ptrs += step_a
        b_ptrs += step_b

    if bias_ptr is not None:
        # Added in fp32 before the one rounding to C's dtype, as cuBLAS's bias epilogue does.
        bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
        acc += bias.to(tl.float32)[None, :]
    c_ptrs = c_ptr + offs_m[:, None].to(tl.int64) * stride_cm + offs_n[None, :] * stride_cn
    tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask_m & mask_n)


def grid_size(M: int, N: int, BLOCK_M: int, BLOCK_N: int) -> int:
    return -(-M // BLOCK_M) * -(-N // BLOCK_N)  # integer arithmetic: triton.cdiv costs microseconds on the host


VECTOR = 8  # elements in 16 bytes of fp16/bf16


def alignment(a: Any, b: Any, out: Any, layout: str | None) -> int:
    """VECTOR where A and C are row-major, B is (K, N) or an (N, K) weight, and every size and stride
    the loads depend on is a multiple of VECTOR elements; else 1 (element-wise loads, any layout).
    For batches (3-D A, B and C) the same of each batch's matrices, and of the batch strides, so that
    every batch's matrices start 16 bytes aligned."""
    if layout is None or a.stride(-1) != 1 or out.stride(-1) != 1:
        return 1
    b_stride = b.stride(-2) if layout == KN else b.stride(-1)
    batch_strides = tuple(t.stride(0) for t in (a, b, out)) if len(a.shape) == 3 else ()
    sizes = (a.shape[-1], b.shape[-1], a.stride(-2), out.stride(-2), b_stride, *batch_strides)
    return VECTOR if all(x % VECTOR == 0 for x in sizes) else 1


@dataclass(frozen=True)
class Plan:
    """What a call does for its inputs' shape class: the launcher (config, constexprs, options),
    the grid and the sizes."""

    launch: Launcher
    grid: tuple[int, ...]  # tiles, then batches for a batched kernel
    sizes: tuple[int, int, int]


# Per shape class (dtypes, shapes, strides, devices of A, B and the output) and config. A cached
# plan is used only for 16-byte aligned addresses; others take the full path every call.
_plans = ShapeClassCache()


def matmul_triton(a: Any, b: Any, bias: Any = None, out: Any = None, **config: Any) -> Any:
    """C = A @ B (+ bias). ``config``: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages;
    any left out come from :func:`tkreg_matmul.configs.pick_config` for these inputs. The checks
    and the choice run once per shape class; the launch goes through tkreg.launch.fastlaunch."""
    return launch_planned(_plans, _plan, a, b, bias, out, config)


def launch_planned(plans: ShapeClassCache, make_plan: Any, a: Any, b: Any, bias: Any, out: Any,
                   config: dict[str, Any]) -> Any:  # fmt: skip
    """A launcher's call: its plan for the inputs' shape class (``make_plan(a, b, bias, out,
    config)`` the first time), the output (a new one where ``out`` is None), the launch."""
    extra = tuple(sorted(config.items())) if config else None
    plan = plans.lookup(a, b, out, extra, bias)
    if plan is None:
        plan = make_plan(a, b, bias, out, config)
        plans.store(a, b, out, extra, plan, bias)
    if out is None:
        out = output_for(a, b, None)
    plan.launch(plan.grid, a, b, out, bias, *plan.sizes, *a.stride(), *b.stride(), *out.stride())
    return out


def _plan(a: Any, b: Any, bias: Any, out: Any, config: dict[str, Any]) -> Plan:
    """The full checks and the launch plan, for a call whose shape class is not cached yet."""
    fail_if(operand_reasons(a, b) + bias_reasons(a, b, bias))
    M, K = a.shape
    N = b.shape[1]
    return tile_plan(matmul_kernel, a, b, bias, out, (M, N, K), b_layout(b) if a.stride(1) == 1 else None, config, ())


def tile_plan(kernel: Any, a: Any, b: Any, bias: Any, out: Any, sizes: tuple[int, int, int], layout: str | None,
              config: dict[str, Any], batches: tuple[int, ...]) -> Plan:
    """The plan of a kernel that launches :func:`matmul_tile` (the operands' own checks passed):
    the device and output checks, the config for one product's ``sizes`` with ``config`` over it,
    the launcher, and the grid (its tiles, then ``batches``)."""
    named = [("a", a), ("b", b)] + ([("bias", bias)] if bias is not None else []) + ([("out", out)] if out is not None else [])
    fail_if(device_reasons(named, interpretable=True))
    out = output_for(a, b, out)  # checks a given output; describes the one a call without it allocates
    M, N, K = sizes
    params = {**pick_config(M, N, K, a.device, layout or "other"), **config}
    align = alignment(a, b, out, layout)
    launch = Launcher(
        kernel,
        BLOCK_M=params["BLOCK_M"], BLOCK_N=params["BLOCK_N"], BLOCK_K=params["BLOCK_K"], GROUP_M=params["GROUP_M"],
        UPCAST=interpreter_active(), ALIGN=align, B_NK=align > 1 and layout == NK,
        num_warps=params["num_warps"], num_stages=params["num_stages"],
    )  # fmt: skip
    return Plan(launch, (grid_size(M, N, params["BLOCK_M"], params["BLOCK_N"]), *batches), sizes)
