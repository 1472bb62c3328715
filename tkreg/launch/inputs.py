"""Input checks launchers run before any launch, so bad input gets a clear error, never a wrong
answer or a memory fault. Each check raises :class:`tkreg.InputError` naming the argument; the
``*_reasons`` forms return the reasons instead, for lookup with concrete inputs.

Tensors are inspected duck-typed; nothing here imports torch at module level.

Fast checks. On small inputs a launcher's checks can cost more host time than its launch (issue
#12), so a launcher first asks a predicate of a few attribute reads that is a *sufficient*
condition for its full checks to pass: plain ``torch.Tensor`` objects on a ``FAST_DEVICE_TYPE``
device, a supported dtype, matching shapes, TMA-ready layouts (:func:`tma_ready`). Whatever the
predicate does not accept goes through the full checks, which explain what is wrong; so a
predicate may be stricter than the checks, never looser. Tests on a machine with no GPU set
``FAST_DEVICE_TYPE = "cpu"`` to check, input by input, that a predicate never accepts what the
full checks refuse.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

from ..core import dtypes
from ..core.errors import InputError
from ..core.platform import interpreter_on

TMA_ALIGNMENT = 16  # bytes: TMA descriptors need 16-byte aligned base and non-last strides
TENSOR_ATTRS = ("dtype", "shape", "stride", "data_ptr", "device")
FAST_DEVICE_TYPE = "cuda"  # the device type fast checks accept (tests on a CPU set "cpu")
_TENSOR_TYPE: Any = None


def is_tensor(t: Any) -> bool:
    """A torch.Tensor, or something with its metadata (duck-typed). torch.Tensor itself is
    recognized by type first: launchers run these checks on every call."""
    cls = type(t)
    if cls.__name__ in ("Tensor", "Parameter") and cls.__module__.startswith("torch"):
        return True
    return all(hasattr(t, a) for a in TENSOR_ATTRS)


def interpreter_active() -> bool:
    """True when triton kernels in this process run under the CPU interpreter."""
    return interpreter_on()


def fail_if(reasons: Iterable[str]) -> None:
    reasons = list(reasons)
    if reasons:
        raise InputError("; ".join(reasons))


def tensor_reasons(
    t: Any,
    name: str,
    *,
    rank: int | None = None,
    dtypes_allowed: Sequence[str] | None = None,
    min_numel: int = 1,
) -> list[str]:
    """Rank, dtype and emptiness of one tensor."""
    if not is_tensor(t):
        return [f"{name} must be a torch.Tensor, got {type(t).__name__}"]
    reasons = []
    if rank is not None and t.dim() != rank:
        reasons.append(f"{name} must be {rank}-D, got shape {tuple(t.shape)}")
    if dtypes_allowed is not None and dtypes.name_of(t.dtype) not in dtypes_allowed:
        reasons.append(f"{name} has dtype {dtypes.name_of(t.dtype)}; supported: {', '.join(dtypes_allowed)}")
    if t.numel() < min_numel:
        reasons.append(f"{name} is empty (shape {tuple(t.shape)}); every dimension must be >= 1")
    return reasons


def device_reasons(named: Sequence[tuple[str, Any]], *, interpretable: bool) -> list[str]:
    """All tensors on one device, and a device the kernel can run on from this process."""
    devices = {str(t.device) for _, t in named}
    if len(devices) > 1:
        listing = ", ".join(f"{n} on {t.device}" for n, t in named)
        return [f"tensors must share one device: {listing}"]
    kind = named[0][1].device.type
    if kind == "cuda":
        return []
    if kind == "cpu" and interpretable and interpreter_active():
        return []
    where = "CUDA tensors" + (" (or CPU tensors with TRITON_INTERPRET=1)" if interpretable else "")
    return [f"{named[0][0]} is on {kind}; this kernel needs {where}"]


def tma_reasons(t: Any, name: str) -> list[str]:
    """What stops ``t`` from being described by a TMA tensor descriptor."""
    reasons = []
    itemsize = t.element_size()
    if t.stride(-1) != 1:
        reasons.append(f"{name}: last stride is {t.stride(-1)}; TMA needs 1 (a contiguous last dimension)")
    if t.data_ptr() % TMA_ALIGNMENT:
        offset = t.data_ptr() % TMA_ALIGNMENT
        reasons.append(f"{name}: base address is not {TMA_ALIGNMENT}-byte aligned (offset {offset}); TMA needs it")
    for dim in range(t.dim() - 1):
        stride_bytes = t.stride(dim) * itemsize
        if stride_bytes % TMA_ALIGNMENT:
            reasons.append(
                f"{name}: stride of dim {dim} is {t.stride(dim)} elements ({stride_bytes} bytes), "
                f"not a multiple of {TMA_ALIGNMENT} bytes; TMA needs it"
            )
    return reasons


def tma_inputs_reasons(*tensors: Any) -> list[str]:
    """Requirements.inputs checker for kernels that read every input through TMA."""
    reasons: list[str] = []
    for i, t in enumerate(tensors):
        reasons.extend(tma_reasons(t, f"input {i}"))
    return reasons


def plain_tensor_type() -> type:
    """``torch.Tensor`` (torch imported on first use): the one type fast checks accept."""
    global _TENSOR_TYPE
    if _TENSOR_TYPE is None:
        import torch

        _TENSOR_TYPE = torch.Tensor
    return _TENSOR_TYPE


@functools.cache
def torch_dtypes(names: tuple[str, ...]) -> frozenset[Any]:
    """The torch dtypes named (``dtypes`` names), as a set fast checks test membership in."""
    import torch

    return frozenset(getattr(torch, name) for name in names)


def tma_layout(t: Any, itemsize: int) -> tuple[int, tuple[int, ...]] | None:
    """(address, strides) of ``t`` exactly when :func:`tma_reasons` finds nothing (last stride 1,
    a 16-byte aligned base, every other stride a multiple of 16 bytes), else None; no messages
    are built."""
    strides = t.stride()
    ptr = t.data_ptr()
    if strides[-1] != 1 or ptr % TMA_ALIGNMENT:
        return None
    for stride in strides[:-1]:  # a loop: all() over a generator costs more for two dimensions
        if stride * itemsize % TMA_ALIGNMENT:
            return None
    return ptr, strides


def tma_ready(t: Any, itemsize: int) -> bool:
    """True exactly when :func:`tma_reasons` finds nothing."""
    return tma_layout(t, itemsize) is not None


def check_output(out: Any, like_shape: Sequence[int], dtype: Any, device: Any, name: str = "out") -> None:
    """An output the caller passed must have the expected shape, dtype and device."""
    reasons = []
    if tuple(out.shape) != tuple(like_shape):
        reasons.append(f"{name} has shape {tuple(out.shape)}; expected {tuple(like_shape)}")
    if out.dtype != dtype:
        reasons.append(f"{name} has dtype {dtypes.name_of(out.dtype)}; expected {dtypes.name_of(dtype)}")
    if out.device != device:
        reasons.append(f"{name} is on {out.device}; expected {device}")
    fail_if(reasons)
