"""The simplest Triton add, for the host suite's reference row: what launching a hand-written
``@triton.jit`` kernel as ``kernel[grid](...)`` costs, with none of tkreg's launch helpers.
Imports triton: only the host suite's process imports this module."""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, c_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    tl.store(c_ptr + offsets, tl.load(a_ptr + offsets, mask=mask) + tl.load(b_ptr + offsets, mask=mask), mask=mask)
