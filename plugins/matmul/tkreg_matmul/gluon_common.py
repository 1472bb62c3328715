"""What the Gluon matmul kernels (Hopper, Blackwell) share: the ``Counter`` aggregate over a ring of
mbarriers, TMA descriptors for A, B and C and their AOT signatures, the persistent grid, and the
input checks (re-exported from :mod:`tkreg_matmul.checks`).

No ``from __future__ import annotations`` here: ``@aggregate`` checks field values against the class
annotations with isinstance, which needs them evaluated.
"""

import functools
from collections.abc import Sequence
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from tkreg.tma import descriptor, descriptor_signature

from .checks import gluon_matmul_inputs_reasons, validate_gluon_matmul

__all__ = [
    "Counter",
    "descriptor_signatures",
    "gluon_matmul_inputs_reasons",
    "matmul_descriptors",
    "num_sms",
    "persistent_grid",
    "validate_gluon_matmul",
]


@aggregate
class Counter:
    """Position in a ring of ``num_barriers`` mbarriers: the slot ``index`` and the ``phase`` to wait
    for, which flips each time the ring wraps. A producer waiting on "empty" barriers starts at
    phase 1 (fresh barriers count as completed once); a consumer of "ready" barriers at phase 0."""

    index: gl.tensor
    phase: gl.tensor
    num_barriers: gl.constexpr

    @gluon.constexpr_function
    def __init__(self, index, phase, num_barriers):
        self.index = index
        self.phase = phase
        self.num_barriers = gl.constexpr(num_barriers)

    @gluon.jit
    def create(phase, num_barriers: gl.constexpr):
        return Counter(gl.to_tensor(0), gl.to_tensor(phase), num_barriers)

    @gluon.must_use_result
    @gluon.jit
    def next(self):
        incr = self.index + 1
        rollover = incr == self.num_barriers
        index = gl.where(rollover, 0, incr)
        phase = gl.where(rollover, self.phase ^ 1, self.phase)
        return Counter(index, phase, self.num_barriers)


def matmul_descriptors(
    a: Any, b: Any, c: Any, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, c_block: Sequence[int] | None = None
) -> tuple[Any, Any, Any]:
    """TMA descriptors for A (blocks BLOCK_M x BLOCK_K), B (BLOCK_K x BLOCK_N) and C (``c_block``,
    default BLOCK_M x BLOCK_N; a subtiled epilogue stores narrower blocks). Each tensor's TMA rules
    are checked first (InputError naming it)."""
    c_block = list(c_block) if c_block is not None else [BLOCK_M, BLOCK_N]
    return (
        descriptor(a, [BLOCK_M, BLOCK_K], "a"),
        descriptor(b, [BLOCK_K, BLOCK_N], "b"),
        descriptor(c, c_block, "out"),
    )


def descriptor_signatures(
    dtype: str, BLOCK_M: int, BLOCK_N: int, BLOCK_K: int, c_block: Sequence[int] | None = None
) -> dict[str, str]:
    """AOT signature entries ``a_desc``, ``b_desc``, ``c_desc`` matching :func:`matmul_descriptors`."""
    c_block = list(c_block) if c_block is not None else [BLOCK_M, BLOCK_N]
    return {
        "a_desc": descriptor_signature(dtype, [BLOCK_M, BLOCK_K]),
        "b_desc": descriptor_signature(dtype, [BLOCK_K, BLOCK_N]),
        "c_desc": descriptor_signature(dtype, c_block),
    }


@functools.cache
def _sm_count(index: int) -> int:
    import torch

    return torch.cuda.get_device_properties(index).multi_processor_count


def num_sms(device: Any) -> int:
    """Streaming multiprocessors of a CUDA device (cached per device)."""
    import torch

    index = device.index if getattr(device, "index", None) is not None else torch.cuda.current_device()
    return _sm_count(index)


def persistent_grid(M: int, N: int, BLOCK_M: int, BLOCK_N: int, device: Any) -> tuple[int]:
    """One program per SM, never more programs than output tiles."""
    tiles = -(-M // BLOCK_M) * -(-N // BLOCK_N)
    return (min(num_sms(device), tiles),)
