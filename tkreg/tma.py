"""TMA tensor descriptors for Gluon kernels: built only after the input passes the checks TMA
needs (so a misaligned tensor gets a clear error, not a fault), and described as a signature
string for ahead-of-time compiles. Imports triton; launcher and aot modules use it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import dtypes
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


def descriptor(t: Any, block_shape: Sequence[int], name: str, layout: Any = None, *, checked: bool = False) -> Any:
    """A TensorDescriptor over ``t`` after checking TMA's alignment rules (InputError if not;
    ``checked``: the caller has just checked them)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    if not checked:
        fail_if(tma_reasons(t, name))
    layout = layout if layout is not None else shared_layout(block_shape, t.dtype)
    return TensorDescriptor.from_tensor(t, list(block_shape), layout)


def descriptor_signature(dtype: str, block_shape: Sequence[int], layout: Any = None) -> str:
    """The signature string triton.compile takes for a tensor-descriptor argument."""
    layout = layout if layout is not None else shared_layout(block_shape, dtype)
    dims = ", ".join(str(d) for d in block_shape)
    return f"tensordesc<{TRITON_TYPE[dtype]}[{dims}],{layout!r}>"
