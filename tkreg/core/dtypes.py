"""Dtype names used in specs, without importing torch.

Specs name dtypes by torch's attribute names ("float16"); ids use the short names ("fp16").
"""

from __future__ import annotations

from typing import Any

SHORT_NAMES: dict[str, str] = {
    "float64": "fp64",
    "float32": "fp32",
    "float16": "fp16",
    "bfloat16": "bf16",
    "float8_e4m3fn": "fp8e4m3",
    "float8_e5m2": "fp8e5m2",
    "int64": "i64",
    "int32": "i32",
    "int16": "i16",
    "int8": "i8",
    "uint8": "u8",
    "bool": "bool",
}

ITEMSIZE: dict[str, int] = {
    "float64": 8,
    "float32": 4,
    "float16": 2,
    "bfloat16": 2,
    "float8_e4m3fn": 1,
    "float8_e5m2": 1,
    "int64": 8,
    "int32": 4,
    "int16": 2,
    "int8": 1,
    "uint8": 1,
    "bool": 1,
}

KNOWN = tuple(SHORT_NAMES)
FLOATING = frozenset(("float64", "float32", "float16", "bfloat16", "float8_e4m3fn", "float8_e5m2"))


def is_floating(name: str) -> bool:
    return name in FLOATING


def short(name: str) -> str:
    return SHORT_NAMES.get(name, name)


def name_of(dtype: Any) -> str:
    """The spec name of a torch dtype (``torch.float16`` -> ``"float16"``) or of a name."""
    if isinstance(dtype, str):
        return dtype
    return str(dtype).removeprefix("torch.")


def torch_dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)
