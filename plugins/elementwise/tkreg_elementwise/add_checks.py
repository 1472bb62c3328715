"""Input checks every add launcher runs before it launches anything: a clear InputError instead of
a wrong answer or a fault. Shared by the portable kernel and the Gluon (TMA) kernels.

Every call first asks :func:`plainly_valid`, a few attribute reads that suffice for the full
checks to pass (tkreg.launch.inputs, "Fast checks"); only what it does not accept pays for the full
checks, which name everything that is wrong."""

from __future__ import annotations

from typing import Any

from tkreg.core.errors import InputError
from tkreg.launch import inputs
from tkreg.launch.inputs import check_output, device_reasons, fail_if, is_tensor, tensor_reasons, tma_reasons

DTYPES = ("float32", "float16", "bfloat16")


def add_reasons(a: Any, b: Any, *, interpretable: bool) -> list[str]:
    """Why (a, b) are not inputs of the add op for a kernel (interpretable: runs on the CPU
    under TRITON_INTERPRET=1); empty when they are."""
    reasons = tensor_reasons(a, "a", rank=2, dtypes_allowed=DTYPES) + tensor_reasons(b, "b", rank=2, dtypes_allowed=DTYPES)
    if not all(map(is_tensor, (a, b))):
        return reasons
    if tuple(a.shape) != tuple(b.shape):
        reasons.append(f"a and b must have one shape, got {tuple(a.shape)} and {tuple(b.shape)}")
    if a.dtype != b.dtype:
        reasons.append(f"a and b must have one dtype, got {a.dtype} and {b.dtype}")
    return reasons + device_reasons([("a", a), ("b", b)], interpretable=interpretable)


def tma_add_reasons(a: Any, b: Any) -> list[str]:
    """Requirements.inputs for the TMA add kernels: what stops a or b from being read through a
    TMA descriptor (16-byte aligned base and row stride, last stride 1)."""
    if not all(map(is_tensor, (a, b))):
        return ["a and b must be torch.Tensors"]
    return tma_reasons(a, "a") + tma_reasons(b, "b")


def plainly_valid(a: Any, b: Any, out: Any, *, tma: bool) -> bool:
    """A sufficient condition for :func:`checked_output` to accept (a, b, out): plain torch
    tensors on one ``inputs.FAST_DEVICE_TYPE`` device, one supported dtype, one non-empty 2-D
    shape and, for TMA kernels, layouts TMA can address. False means "run the full checks"."""
    if tma:
        return tma_inputs_key(a, b, out) is not None
    return _plain_metadata(a, b, out) is not None


def _plain_metadata(a: Any, b: Any, out: Any) -> tuple[Any, Any, Any] | None:
    """(dtype, shape, device) when a, b and ``out`` (if given) pass the portable checks plainly."""
    tensor = inputs.plain_tensor_type()
    if type(a) is not tensor or type(b) is not tensor:
        return None
    dtype, shape, device = a.dtype, a.shape, a.device
    if (
        b.dtype is not dtype
        or dtype not in inputs.torch_dtypes(DTYPES)
        or len(shape) != 2
        or b.shape != shape
        or 0 in shape
        or device.type != inputs.FAST_DEVICE_TYPE
        or b.device != device
    ):
        return None
    if out is not None and (type(out) is not tensor or out.dtype is not dtype or out.shape != shape or out.device != device):
        return None
    return dtype, shape, device


def tma_inputs_key(a: Any, b: Any, out: Any) -> tuple[Any, ...] | None:
    """None, or, when (a, b, out) plainly pass every TMA add check, a key of everything those
    checks, the launch plan and the descriptors read: dtype, shape, device and each tensor's
    address and strides (None for an out not given)."""
    common = _plain_metadata(a, b, out)
    if common is None:
        return None
    itemsize = a.element_size()
    layout_a, layout_b = inputs.tma_layout(a, itemsize), inputs.tma_layout(b, itemsize)
    if layout_a is None or layout_b is None:
        return None
    layout_out = None
    if out is not None:
        layout_out = inputs.tma_layout(out, itemsize)
        if layout_out is None:
            return None
    return (*common, layout_a, layout_b, layout_out)


def checked_output(a: Any, b: Any, out: Any, *, interpretable: bool, tma: bool = False) -> Any:
    """Validate a and b (and, for TMA kernels, their alignment) and a given ``out`` (shape,
    dtype, device, alignment), raising one InputError with every reason; then return ``out``, or
    a new output when it is None."""
    if not plainly_valid(a, b, out, tma=tma):
        reasons = add_reasons(a, b, interpretable=interpretable)
        tensors = all(map(is_tensor, (a, b)))
        if tma and tensors:
            # alignment is reported with the other reasons, so even CPU tensors get the whole story
            reasons += tma_add_reasons(a, b)
        if out is not None and tensors:
            reasons += _output_reasons(out, a, tma=tma)
        fail_if(reasons)
    return new_output(a) if out is None else out


def _output_reasons(out: Any, a: Any, *, tma: bool) -> list[str]:
    reasons = tensor_reasons(out, "out", rank=2)
    if reasons:
        return reasons
    try:
        check_output(out, a.shape, a.dtype, a.device)
    except InputError as e:
        reasons.append(str(e))
    return reasons + (tma_reasons(out, "out") if tma else [])


def new_output(a: Any) -> Any:
    """An empty tensor for a + b. Row-major inputs keep their row stride, so an input whose rows
    are padded to 16-byte multiples (a TMA-legal view) gets an output TMA can write too; any
    other layout (transposed, overlapping rows) gets a contiguous output."""
    import torch

    rows, cols = a.shape
    if a.stride(1) == 1 and a.stride(0) >= cols:
        return torch.empty_strided((rows, cols), (a.stride(0), 1), dtype=a.dtype, device=a.device)
    return torch.empty((rows, cols), dtype=a.dtype, device=a.device)
