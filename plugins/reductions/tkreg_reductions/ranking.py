"""Rank the sum_row kernels for concrete inputs by what they were measured to reach.

``measured.json`` holds GB/s per benchmark shape, dtype and kernel from one recorded run of
``pytest --tkreg --tkreg-bench`` (device, date and command are in the file and in BENCHMARKS.md).
An input is mapped to the benchmark shape of its class (narrow rows, many medium rows, square,
long rows, a few very long rows); a kernel's score is its measured GB/s there. Without a
measurement the score says so and is 0, so the static order decides. On a GPU with wall-time
measurements (tkreg.ops.walltime), lookup ranks measured kernels by estimated wall time per call
instead; this device-time score then orders only kernels without a measurement.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable
from importlib import resources
from typing import Any

# The shape classes are the op's own, as tkreg.ops' wall-time model uses them too.
from .shapes import row_class as shape_class

# Each class and the benchmark shape measured for it.
CLASSES = {
    "narrow rows": "1048576x32",
    "medium rows": "65536x1024",
    "square": "16384x16384",
    "long rows": "4096x131072",
    "few long rows": "32x1048576",
}


@functools.lru_cache(maxsize=1)
def measured() -> dict[str, Any]:
    path = resources.files("tkreg_reductions").joinpath("measured.json")
    if not path.is_file():
        return {}
    return json.loads(path.read_text())


def _device_name(x: Any) -> str:
    """The name of the GPU ``x`` is on ("" off a GPU)."""
    device = getattr(x, "device", None)
    if getattr(device, "type", None) != "cuda":
        return ""
    import torch

    return torch.cuda.get_device_name(device)


def score(kernel: str, x: Any, table: dict[str, Any] | None = None) -> tuple[float, str]:
    """The kernel's measured GB/s on the class of ``x``, where it was measured on the GPU ``x``
    is on; elsewhere 0 (figures of another device do not decide here)."""
    table = measured() if table is None else table
    where_measured, here = table.get("device", "?"), _device_name(x)
    if here != where_measured:
        return 0.0, f"no measurement on {here or 'this machine (no GPU)'}: the table is of {where_measured}"
    cls = shape_class(*x.shape)
    shape = CLASSES[cls]
    dtype = str(x.dtype).removeprefix("torch.")
    per_dtype = table.get("gbps", {}).get(shape, {})
    figures = per_dtype.get(dtype) or per_dtype.get("bfloat16" if dtype == "float16" else dtype, {})
    if kernel not in figures:
        return 0.0, f"no measurement of {kernel} for {cls} ({shape})"
    where = f"{table.get('device', '?')}, {table.get('date', '?')}"
    return float(figures[kernel]), f"{figures[kernel]:.0f} GB/s measured at {shape} ({cls}; {where})"


def _scorer(kernel: str) -> Callable[[Any], tuple[float, str]]:
    def kernel_score(x: Any) -> tuple[float, str]:
        return score(kernel, x)

    kernel_score.__name__ = f"score_{kernel}"
    return kernel_score


score_sum_row = _scorer("sum_row")
score_sum_row_blocked = _scorer("sum_row_blocked")
score_sum_row_blocked_iterative = _scorer("sum_row_blocked_iterative")
score_sum_row_tiled = _scorer("sum_row_tiled")
