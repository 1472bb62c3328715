"""The second half of split-K: add the SPLIT_K fp32 partial sums of a (SPLIT_K, M, N) workspace in a
fixed order (slice 0 first), then an optional bias (N,), and store the result in the output's
dtype. The order never depends on which unit of the first kernel finished first, so a split-K
matmul returns the same bits on every run. The bias is added here, once, in fp32 before the one
rounding (the partial sums carry none), as the unsplit kernels add it to their accumulator. A
plain Triton kernel: it runs under the interpreter too.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# Elements per program: 1024 fp32 partials per slice, 4 KB read per slice and program.
BLOCK = 1024
NUM_WARPS = 4


# Sizes and strides stay runtime integers: the JIT turns an integer argument equal to 1 into a
# constant (M = 1 for a single-row input), and ``M.to(tl.int64)`` then fails to compile (H100 run
# of 2026-11-23). ``bias_ptr`` None is a constexpr to triton: that kernel has no bias code.
@triton.jit(do_not_specialize=["M", "N", "SPLIT_K", "stride_om", "stride_on"])
def splitk_reduce_kernel(ws_ptr, out_ptr, bias_ptr, M, N, SPLIT_K, stride_om, stride_on, BLOCK: tl.constexpr):
    # Flat row-major index over (M, N): the workspace is contiguous, the output may be strided.
    idx = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    total = M.to(tl.int64) * N
    mask = idx < total
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for s in range(SPLIT_K):
        acc += tl.load(ws_ptr + s * total + idx, mask=mask, other=0.0)
    row = idx // N
    col = idx - row * N
    if bias_ptr is not None:
        # After every slice: the same fp32 sum, then bias, then rounding, as an unsplit tile.
        acc += tl.load(bias_ptr + col, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * stride_om + col * stride_on, acc.to(out_ptr.dtype.element_ty), mask=mask)


def reduce_partials(workspace: Any, out: Any, bias: Any = None) -> Any:
    """out[m, n] = sum over s of workspace[s, m, n], in order s = 0, 1, ..., plus bias[n] where a
    bias (a contiguous (N,) vector, checked by the caller) is given; returns out."""
    split_k, M, N = workspace.shape
    grid = (triton.cdiv(M * N, BLOCK),)
    splitk_reduce_kernel[grid](workspace, out, bias, M, N, split_k, out.stride(0), out.stride(1), BLOCK=BLOCK,
                               num_warps=NUM_WARPS)  # fmt: skip
    return out
