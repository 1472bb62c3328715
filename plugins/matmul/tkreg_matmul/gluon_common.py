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

from tkreg.core import bounded
from tkreg.launch.inputs import TMA_ALIGNMENT
from tkreg.launch.tma import descriptor_signature, shared_layout

from .checks import gluon_matmul_inputs_reasons, validate_gluon_matmul
from .layouts import NK

__all__ = [
    "Counter",
    "GluonLaunch",
    "ShapeClassCache",
    "descriptor_signatures",
    "gluon_matmul_inputs_reasons",
    "num_sms",
    "operands",
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


@functools.lru_cache(maxsize=256)
def _layout(block_shape: tuple[int, ...], dtype: Any) -> Any:
    # NVMMASharedLayout.get_default_for costs microseconds: once per block shape and dtype.
    return shared_layout(list(block_shape), dtype)


def descriptor_signatures(dtype: str, blocks: Mapping[str, Sequence[int]], c_dtype: str | None = None) -> dict[str, str]:
    """AOT signature entries ``a_desc``, ``b_desc``, ``c_desc`` matching the descriptors GluonLaunch makes
    (``c_dtype``: C's element type when it differs from the operands', e.g. a float32 workspace)."""
    return {
        "a_desc": descriptor_signature(dtype, blocks["a"]),
        "b_desc": descriptor_signature(dtype, blocks["b"]),
        "c_desc": descriptor_signature(c_dtype or dtype, blocks["c"]),
    }


class ShapeClassCache:
    """What a launcher resolved for inputs that passed its checks (B's layout, its plan), by
    everything the checks read except the addresses: dtypes, shapes, strides and devices of A, B,
    the output and a bias (None or a tensor), plus the launcher's own ``extra`` key (its
    parameters). A hit still checks the 16-byte alignment of A's, B's and the output's addresses,
    so a misaligned tensor of a cached shape class gets the full checks and their error; anything
    that is not a tensor is a miss, and gets them too. Bounded: cleared when full."""

    def __init__(self, maxsize: int = 4096) -> None:
        self.maxsize = maxsize
        self._entries: dict[Any, Any] = {}

    @staticmethod
    def _key(a: Any, b: Any, out: Any, extra: Any, bias: Any) -> Any:
        o = None if out is None else (out.dtype, out.shape, out.stride(), out.device)
        c = None if bias is None else (bias.dtype, bias.shape, bias.stride(), bias.device)
        return (a.dtype, b.dtype, a.shape, b.shape, a.stride(), b.stride(), a.device, b.device, o, c, extra)

    def lookup(self, a: Any, b: Any, out: Any, extra: Any = None, bias: Any = None) -> Any:
        """The stored value, or None (not seen, not tensors, or an address not 16-byte aligned)."""
        try:
            value = self._entries.get(self._key(a, b, out, extra, bias))
            if value is None or a.data_ptr() % TMA_ALIGNMENT or b.data_ptr() % TMA_ALIGNMENT:
                return None
            if out is not None and out.data_ptr() % TMA_ALIGNMENT:
                return None
        except (AttributeError, TypeError):
            return None
        return value

    def store(self, a: Any, b: Any, out: Any, extra: Any, value: Any, bias: Any = None) -> None:
        if len(self._entries) >= self.maxsize:
            self._entries.clear()
        self._entries[self._key(a, b, out, extra, bias)] = value

    def clear(self) -> None:
        self._entries.clear()


BOUND_LAUNCHES = 256  # whole launches kept per kernel, oldest dropped first


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


class GluonLaunch:
    """Launches of one Gluon matmul kernel whose runtime arguments are its three TMA descriptors
    (A, B as stored, C or a split-K workspace), then any plain ``args`` the caller passes (a bias
    pointer or None), through :mod:`tkreg.launch.fastlaunch`.

    One :class:`~tkreg.launch.fastlaunch.Launcher` per compiled variant (the constexprs, options, block
    shapes and dtype the caller's plan names), and per set of tensors (address, shape and strides of
    each, which is all a descriptor encodes) and plain arguments (a tensor's address and dtype, or
    None) one bound launch over cached, immutable descriptors (:func:`tkreg.launch.tma.descriptor`):
    a repeated call encodes no CUtensorMap and binds no argument. A plain tensor argument is bound
    as its address (:class:`~tkreg.launch.fastlaunch.TensorAddress`), so the bounded cache of bound
    launches keeps no tensor's memory alive; None stays None, which triton compiles as a constant.
    An address cannot change, so fastlaunch specializes and expands such a bound launch once, as
    one of descriptors alone.
    The caller has checked TMA's rules for these tensors and whatever the kernel needs of the
    plain ones. Launch hooks (profilers) and anything else fastlaunch does not take get triton's
    ordinary launch, as fastlaunch decides."""

    def __init__(self, kernel: Any, max_bound: int = BOUND_LAUNCHES) -> None:
        self.kernel = kernel
        self.max_bound = max_bound
        self._launchers: dict[Any, Any] = {}
        self._bound: dict[Any, Any] = {}

    def __call__(self, grid: tuple[int, ...], tensors: Sequence[Any], blocks: Mapping[str, Sequence[int]],
                 constexprs: Mapping[str, Any], options: Mapping[str, Any], variant: Any,
                 args: Sequence[Any] = ()) -> None:  # fmt: skip
        """``tensors``: A, B as stored (W for ``x @ W.t()``), C; ``blocks``: their block shapes under
        "a", "b", "c"; ``variant``: a hashable key for everything that decides the compiled kernel;
        ``args``: the kernel's runtime arguments after the three descriptors, each a tensor or None."""
        key = (variant, *((t.data_ptr(), t.shape, t.stride()) for t in tensors))
        if args:
            # What a plain argument gives the kernel: its address, and its dtype (the pointer's type).
            key += tuple(None if x is None else (x.data_ptr(), x.dtype) for x in args)
        bound = self._bound.get(key)
        if bound is None:
            from tkreg.launch.fastlaunch import Launcher, TensorAddress
            from tkreg.launch.tma import descriptor

            launcher = self._launchers.get(variant)
            if launcher is None:
                launcher = self._launchers[variant] = Launcher(self.kernel, **constexprs, **options)
            descs = [
                descriptor(t, blocks[name], name, _layout(tuple(blocks[name]), t.dtype), checked=True)
                for t, name in zip(tensors, ("a", "b", "c"))
            ]
            plain = [None if x is None else TensorAddress(x.data_ptr(), x.dtype) for x in args]
            bound = bounded.put(self._bound, key, launcher.bind(*descs, *plain), self.max_bound)
        bound(grid)


def operands(a: Any, b: Any, c: Any, b_layout: str) -> tuple[Any, Any, Any]:
    """The tensors the descriptors describe: B as stored (W = B.t() for ``nk``)."""
    return a, (b.t() if b_layout == NK else b), c
