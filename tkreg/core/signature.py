"""Input signatures: what a dispatch or lookup decision may depend on, as a hashable key.

A decision about concrete inputs (which kernels take them, which is fastest) depends on their
dtypes, shapes, strides, devices and base-address alignment, never on their values. The key
holds exactly those, so a repeated call with inputs of the same signature reuses the decision.
Shapes and strides are kept exact rather than bucketed: building the key is as cheap either way,
and an exact key can never reuse a decision for inputs a kernel's checks would judge differently.

Input checks (``Requirements.inputs``) must therefore depend on the base address only through its
alignment up to ALIGNMENT_CLASS_BYTES. Nothing here imports torch.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

# Alignment classes kept apart in a key: every registered check asks for at most 16 bytes (TMA);
# 128 leaves room for stricter ones. torch's caching allocator returns 512-byte aligned blocks,
# so fresh tensors of one shape share one class.
ALIGNMENT_CLASS_BYTES = 128


def tensor_key(t: Any) -> tuple[Any, ...]:
    """dtype, shape, strides, device and base alignment class of one tensor (duck-typed)."""
    return (t.dtype, tuple(t.shape), tuple(t.stride()), t.device, t.data_ptr() % ALIGNMENT_CLASS_BYTES)


def inputs_key(inputs: Sequence[Any]) -> tuple[Any, ...] | None:
    """The signature of ``inputs``, or None when some input cannot be part of a key (an
    unhashable non-tensor, or a tensor-like object missing metadata)."""
    parts: list[Any] = []
    for x in inputs:
        if hasattr(x, "data_ptr") and hasattr(x, "stride"):
            try:
                part: Any = tensor_key(x)
                hash(part)
            except (TypeError, AttributeError, RuntimeError):
                return None
        elif isinstance(x, Hashable):
            part = ("value", type(x), x)
        else:
            return None
        parts.append(part)
    return tuple(parts)
