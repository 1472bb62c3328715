"""``matmul_triton_batched``: C[i] = A[i] @ B[i] for batches A (Bt, M, K) and B (Bt, K, N), one
launch for every batch: the tiles of :func:`tkreg_matmul.triton_kernel.matmul_tile` on the first
grid axis, the batch on the second. Each operand may have any strides, B included (a batch of
(K, N) matrices, or the transposed view of a batch of (N, K) weights, as ``torch.bmm`` is given
them), so ``tkreg.ops.matmul`` passes a batched call's tensors as they are. Runs on any CUDA GPU
with capability >= 8.0 and under the Triton CPU interpreter.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from tkreg.launch.inputs import fail_if

from .checks import batched_operand_reasons, bias_reasons
from .gluon_common import ShapeClassCache
from .layouts import b_layout
from .triton_kernel import Plan, launch_planned, matmul_tile, tile_plan


@triton.jit
def batched_matmul_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K,
    stride_ab, stride_am, stride_ak, stride_bb, stride_bk, stride_bn, stride_cb, stride_cm, stride_cn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    UPCAST: tl.constexpr, ALIGN: tl.constexpr, B_NK: tl.constexpr,
):  # fmt: skip
    batch = tl.program_id(1).to(tl.int64)  # 64-bit: a batch's offset can pass 2^31 elements
    if ALIGN > 1:
        # Checked by the launcher, as matmul_tile's strides are: every batch's matrix starts 16 bytes aligned.
        stride_ab = (stride_ab // ALIGN) * ALIGN
        stride_bb = (stride_bb // ALIGN) * ALIGN
        stride_cb = (stride_cb // ALIGN) * ALIGN
    # One bias (N,) for every batch, as F.linear and torch.baddbmm broadcast it.
    matmul_tile(a_ptr + batch * stride_ab, b_ptr + batch * stride_bb, c_ptr + batch * stride_cb, bias_ptr, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, tl.program_id(0),
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, UPCAST, ALIGN, B_NK)  # fmt: skip


_plans = ShapeClassCache()


def matmul_triton_batched(a: Any, b: Any, bias: Any = None, out: Any = None, **config: Any) -> Any:
    """C = A @ B (+ bias (N,), the same for every batch) per batch, into ``out`` (Bt, M, N) or a new
    contiguous one. ``config``: BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages; any left
    out come from :func:`tkreg_matmul.configs.pick_config` for one batch's sizes."""
    return launch_planned(_plans, _plan, a, b, bias, out, config)


def _plan(a: Any, b: Any, bias: Any, out: Any, config: dict[str, Any]) -> Plan:
    fail_if(batched_operand_reasons(a, b) + bias_reasons(a, b, bias))
    batches, M, K = a.shape
    layout = b_layout(b[0]) if a.stride(2) == 1 else None
    return tile_plan(batched_matmul_kernel, a, b, bias, out, (M, b.shape[2], K), layout, config, (batches,))
