"""What the Gluon matmul kernels (Hopper, Blackwell) share: the ``Counter`` aggregate over a ring of
mbarriers, TMA descriptors for A, B (either layout, see :mod:`tkreg_matmul.layouts`) and C and their
AOT signatures, the persistent grid, and the input checks (re-exported from :mod:`tkreg_matmul.checks`).

No ``from __future__ import annotations`` here: ``@aggregate`` checks field values against the class
annotations with isinstance, which needs them evaluated.
"""

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.language.core import _aggregate as aggregate

from tkreg.tma import descriptor, descriptor_signature

from .checks import gluon_matmul_inputs_reasons, validate_gluon_matmul
from .layouts import NK

__all__ = [
    "Counter",
    "descriptor_signatures",
    "gluon_matmul_inputs_reasons",
    "launch_gluon",
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


def matmul_descriptors(a: Any, b: Any, c: Any, blocks: Mapping[str, Sequence[int]], b_layout: str) -> tuple[Any, Any, Any]:
    """TMA descriptors for A, B and C with the block shapes in ``blocks`` ("a", "b", "c"). B is
    described as stored: over B itself for ``kn``, over the (N, K) tensor W = B.t() for ``nk``. C is
    the (M, N) output, or a 3-D split-K workspace. The caller has checked TMA's rules
    (validate_gluon_matmul), so they are not checked again here."""
    w = b.t() if b_layout == NK else b
    return (
        descriptor(a, blocks["a"], "a", checked=True),
        descriptor(w, blocks["b"], "b", checked=True),
        descriptor(c, blocks["c"], "out", checked=True),
    )


def descriptor_signatures(dtype: str, blocks: Mapping[str, Sequence[int]], c_dtype: str | None = None) -> dict[str, str]:
    """AOT signature entries ``a_desc``, ``b_desc``, ``c_desc`` matching :func:`matmul_descriptors`
    (``c_dtype``: C's element type when it differs from the operands', e.g. a float32 workspace)."""
    return {
        "a_desc": descriptor_signature(dtype, blocks["a"]),
        "b_desc": descriptor_signature(dtype, blocks["b"]),
        "c_desc": descriptor_signature(c_dtype or dtype, blocks["c"]),
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


def persistent_grid(M: int, N: int, BLOCK_M: int, BLOCK_N: int, device: Any, split_k: int = 1) -> tuple[int]:
    """One program per SM, never more programs than work units (output tiles times K slices)."""
    units = -(-M // BLOCK_M) * -(-N // BLOCK_N) * split_k
    return (min(num_sms(device), units),)


def launch_gluon(kernel: Any, grid: tuple[int, ...], descriptors: Sequence[Any], constexprs: Mapping[str, Any],
                 options: Mapping[str, Any]) -> None:  # fmt: skip
    """Launch a Gluon matmul kernel whose runtime arguments are its TMA descriptors."""
    kernel[grid](*descriptors, **constexprs, **options)
