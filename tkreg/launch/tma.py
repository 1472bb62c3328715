"""TMA tensor descriptors for Gluon kernels: built only after the input passes the checks TMA
needs (so a misaligned tensor gets a clear error, not a fault), kept in a bounded cache so a
repeated launch neither checks nor encodes them again, and described as a signature string for
ahead-of-time compiles. Imports triton; launcher and aot modules use it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core import bounded, dtypes
from .inputs import fail_if, tma_reasons

# Element type names in triton signatures.
TRITON_TYPE: dict[str, str] = {
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8e4nv",
    "float8_e5m2": "fp8e5",
    "int32": "i32",
    "int8": "i8",
}


def gl_dtype(dtype: Any) -> Any:
    """The Gluon element type for a torch dtype or dtype name."""
    from triton.experimental.gluon import language as gl

    name = dtypes.name_of(dtype)
    table = {
        "float32": gl.float32,
        "float16": gl.float16,
        "bfloat16": gl.bfloat16,
        "float8_e4m3fn": gl.float8e4nv,
        "float8_e5m2": gl.float8e5,
        "int32": gl.int32,
        "int8": gl.int8,
    }
    try:
        return table[name]
    except KeyError:
        raise ValueError(f"no Gluon element type for {name}") from None


def shared_layout(block_shape: Sequence[int], dtype: Any) -> Any:
    """The default NVMMA shared-memory layout (swizzled for TMA and the tensor cores)."""
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(list(block_shape), gl_dtype(dtype))


# Descriptors kept, oldest dropped first: a few per (tensor, block) a workload launches on. Each
# holds no tensor (tkreg.launch.fastlaunch.TensorAddress), only its address, and the CUtensorMaps made
# for it (128 bytes each).
DESCRIPTOR_CACHE_SIZE = 512
_DESCRIPTORS: dict[tuple[Any, ...], Any] = {}


def descriptor(t: Any, block_shape: Sequence[int], name: str, layout: Any = None, *, checked: bool = False) -> Any:
    """A descriptor of ``t`` in ``block_shape`` boxes (a tkreg.launch.fastlaunch.FrozenDescriptor, which
    is a Gluon TensorDescriptor) with ``layout`` (default: :func:`shared_layout`), after checking
    TMA's alignment rules (InputError if not; ``checked``: the caller has just checked them).

    Cached by what the descriptor encodes: address, shape, strides, dtype, block and layout. A
    cached one passed these checks when it was made, and every check is a function of that key,
    so a hit skips them. The layout enters the key by identity (its hash costs more than the rest
    of the key): the cached descriptor holds the layout, so its id cannot be reused meanwhile,
    and a hit is confirmed with ``is``; equal layouts made anew per call are correct, not cached.
    """
    block = tuple(block_shape)
    key = (t.data_ptr(), t.shape, t.stride(), t.dtype, block, None if layout is None else id(layout))
    found = _DESCRIPTORS.get(key)
    if found is not None and (layout is None or found.layout is layout):
        return found
    from .fastlaunch import FrozenDescriptor

    if not checked:
        fail_if(tma_reasons(t, name))
    made = FrozenDescriptor.of(t, block, layout if layout is not None else shared_layout(block, t.dtype))
    return bounded.put(_DESCRIPTORS, key, made, DESCRIPTOR_CACHE_SIZE)


def clear_descriptor_cache() -> None:
    _DESCRIPTORS.clear()


def descriptor_signature(dtype: str, block_shape: Sequence[int], layout: Any = None) -> str:
    """The signature string triton.compile takes for a tensor-descriptor argument."""
    layout = layout if layout is not None else shared_layout(block_shape, dtype)
    dims = ", ".join(str(d) for d in block_shape)
    return f"tensordesc<{TRITON_TYPE[dtype]}[{dims}],{layout!r}>"
