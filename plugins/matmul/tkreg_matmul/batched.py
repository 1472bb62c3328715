"""``matmul_triton_batched``: C[i] = A[i] @ B[i] for batches A (Bt, M, K) and B (Bt, K, N), one
launch for every batch: the tiles of :func:`tkreg_matmul.triton_kernel.matmul_tile` on the first
grid axis, the batch on the second. Each operand may have any strides, B included (a batch of
(K, N) matrices, or the transposed view of a batch of (N, K) weights, as ``torch.bmm`` is given
them), so ``tkreg.ops.matmul`` passes a batched call's tensors as they are. Runs on any CUDA GPU
with capability >= 8.0 and under the Triton CPU interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import triton
import triton.language as tl

from tkreg.launch.fastlaunch import Launcher
from tkreg.launch.inputs import check_output, device_reasons, fail_if, interpreter_active

from .checks import batched_operand_reasons
from .configs import pick_config
from .gluon_common import ShapeClassCache
from .layouts import NK, b_layout
from .triton_kernel import VECTOR, grid_size, matmul_tile


@triton.jit
def batched_matmul_kernel(
    a_ptr, b_ptr, c_ptr, M, N, K,
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
    matmul_tile(a_ptr + batch * stride_ab, b_ptr + batch * stride_bb, c_ptr + batch * stride_cb, M, N, K,
                stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, tl.program_id(0),
                BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, UPCAST, ALIGN, B_NK)  # fmt: skip


def alignment(a: Any, b: Any, out: Any, layout: str | None) -> int:
    """VECTOR where each batch's A and C are row-major, B is a batch of (K, N) matrices or of (N, K)
    weights' transposes, and every size and stride the loads depend on (batch strides included) is
    a multiple of VECTOR elements; else 1."""
    if layout is None or a.stride(2) != 1 or out.stride(2) != 1:
        return 1
    b_stride = b.stride(1) if layout != NK else b.stride(2)
    sizes = (a.shape[2], b.shape[2], a.stride(1), out.stride(1), b_stride, a.stride(0), b.stride(0), out.stride(0))
    return VECTOR if all(x % VECTOR == 0 for x in sizes) else 1


@dataclass(frozen=True)
class Plan:
    launch: Launcher
    grid: tuple[int, int]
    sizes: tuple[int, int, int]


_plans = ShapeClassCache()


def matmul_triton_batched(a: Any, b: Any, out: Any = None, **config: Any) -> Any:
    """C = A @ B per batch, into ``out`` (Bt, M, N) or a new contiguous one. ``config``: BLOCK_M,
    BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages; any left out come from
    :func:`tkreg_matmul.configs.pick_config` for one batch's sizes."""
    extra = tuple(sorted(config.items())) if config else None
    plan = _plans.lookup(a, b, out, extra)
    if plan is None:
        plan = _plan(a, b, out, config)
        _plans.store(a, b, out, extra, plan)
    if out is None:
        import torch

        out = torch.empty((a.shape[0], a.shape[1], b.shape[2]), dtype=a.dtype, device=a.device)
    plan.launch(plan.grid, a, b, out, *plan.sizes, *a.stride(), *b.stride(), *out.stride())
    return out


def _plan(a: Any, b: Any, out: Any, config: dict[str, Any]) -> Plan:
    fail_if(batched_operand_reasons(a, b))
    named = [("a", a), ("b", b)] + ([("out", out)] if out is not None else [])
    fail_if(device_reasons(named, interpretable=True))
    batches, M, K = a.shape
    N = b.shape[2]
    if out is not None:
        check_output(out, (batches, M, N), a.dtype, a.device)
    layout = b_layout(b[0]) if a.stride(2) == 1 else None
    params = {**pick_config(M, N, K, a.device, layout or "other"), **config}
    shape = (batches, M, N)
    align = alignment(a, b, out if out is not None else _Contiguous(shape), layout)
    launch = Launcher(
        batched_matmul_kernel,
        BLOCK_M=params["BLOCK_M"], BLOCK_N=params["BLOCK_N"], BLOCK_K=params["BLOCK_K"], GROUP_M=params["GROUP_M"],
        UPCAST=interpreter_active(), ALIGN=align, B_NK=align > 1 and layout == NK,
        num_warps=params["num_warps"], num_stages=params["num_stages"],
    )  # fmt: skip
    return Plan(launch, (grid_size(M, N, params["BLOCK_M"], params["BLOCK_N"]), batches), (M, N, K))


class _Contiguous:
    """The strides of the contiguous output a call without ``out`` allocates."""

    def __init__(self, shape: tuple[int, int, int]) -> None:
        self._strides = (shape[1] * shape[2], shape[2], 1)

    def stride(self, dim: int) -> int:
        return self._strides[dim]
