"""Launcher and ahead-of-time description of ``matmul_blackwell_ws``."""

from __future__ import annotations

import functools
from typing import Any

from tkreg_matmul.checks import refused_bias
from tkreg_matmul.gluon_common import (
    GluonLaunch,
    ShapeClassCache,
    descriptor_signatures,
    operands,
    persistent_grid,
    validate_gluon_matmul,
)
from tkreg_matmul.layouts import KN, LAYOUTS, NK
from tkreg_matmul.op import make_output

from tkreg import RequirementError
from tkreg.core.capability import Arch
from tkreg.core.schedulers import gluon_impl
from tkreg.launch.aot import AotSpec
from tkreg.launch.inputs import fail_if

from .kernel import NUM_ACC_BUFFERS as KERNEL_ACC_BUFFERS
from .kernel import matmul_blackwell_ws_kernel

# The seed's parameters: tcgen05's largest single-CTA tile (M = 128) and a 256-column accumulator,
# two of which fill TMEM_COLUMNS; 4 operand buffers fit shared memory once the epilogue is subtiled.
DEFAULTS: dict[str, Any] = {
    "BLOCK_M": 128,
    "BLOCK_N": 256,
    "BLOCK_K": 64,
    "num_buffers": 4,
    "SUBTILE_FACTOR": 4,
    "num_warps": 4,
    "scheduler": "grouped-8",
}
TCGEN05_BLOCK_M = (64, 128)  # M of a single-CTA tcgen05 MMA
TMEM_COLUMNS = 512  # 32-bit columns of tensor memory per SM; holds both accumulators
NUM_ACC_BUFFERS = KERNEL_ACC_BUFFERS.value
TMA_MIN_BOX_BYTES = 16  # a TMA box's inner dimension spans at least 16 bytes
_launch = GluonLaunch(matmul_blackwell_ws_kernel)
# Per shape class (inputs' dtypes, shapes, strides, devices) and parameters: the launch's fixed parts.
_resolved = ShapeClassCache()
SHARED_MEMORY_BYTES = 232448  # 227 KiB usable per block on sm_100 (CUDA programming guide, compute capability 10.0)
OPERAND_BYTES = 2  # fp16 / bf16


def config_reasons(c: dict[str, Any]) -> list[str]:
    """Why a parameter set cannot compile or run (empty: it can)."""
    reasons = []
    if c["BLOCK_M"] not in TCGEN05_BLOCK_M:
        reasons.append(f"BLOCK_M={c['BLOCK_M']}: a single-CTA tcgen05 MMA has M in {TCGEN05_BLOCK_M}")
    if NUM_ACC_BUFFERS * c["BLOCK_N"] > TMEM_COLUMNS:
        need = NUM_ACC_BUFFERS * c["BLOCK_N"]
        reasons.append(f"BLOCK_N={c['BLOCK_N']}: {NUM_ACC_BUFFERS} fp32 accumulators need {need} > {TMEM_COLUMNS} TMEM columns")
    if c["BLOCK_N"] % c["SUBTILE_FACTOR"] or (c["BLOCK_N"] // c["SUBTILE_FACTOR"]) * OPERAND_BYTES < TMA_MIN_BOX_BYTES:
        reasons.append(f"SUBTILE_FACTOR={c['SUBTILE_FACTOR']} must split BLOCK_N={c['BLOCK_N']} into slices of >= 16 bytes")
    if c["num_buffers"] < 1:
        reasons.append(f"num_buffers={c['num_buffers']} must be >= 1")
    ring = c["num_buffers"] * (c["BLOCK_M"] + c["BLOCK_N"]) * c["BLOCK_K"] * OPERAND_BYTES
    epilogue = c["BLOCK_M"] * (c["BLOCK_N"] // max(c["SUBTILE_FACTOR"], 1)) * OPERAND_BYTES
    if ring + epilogue > SHARED_MEMORY_BYTES:
        reasons.append(
            f"operand ring ({ring} B) and epilogue buffer ({epilogue} B) exceed {SHARED_MEMORY_BYTES} B of shared memory"
        )
    return reasons


def _params(config: dict[str, Any]) -> dict[str, Any]:
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"matmul_blackwell_ws: unknown parameters {unknown}; known: {sorted(DEFAULTS)}")
    params = {**DEFAULTS, **config}
    reasons = config_reasons(params)
    if reasons:
        raise ValueError("matmul_blackwell_ws: " + "; ".join(reasons))
    return params


def _check_device(device: Any) -> None:
    import torch

    major, minor = torch.cuda.get_device_capability(device)
    if major != 10:
        raise RequirementError(
            f"matmul_blackwell_ws needs sm_100a (capability 10.x) for tcgen05 and tensor memory; this device is {major}.{minor}"
        )


def blocks(params: dict[str, Any], b_layout: str) -> dict[str, list[int]]:
    """TMA block shapes: B's as stored (BLOCK_N x BLOCK_K of an (N, K) weight for ``nk``), C's one
    epilogue slice."""
    bm, bn, bk = params["BLOCK_M"], params["BLOCK_N"], params["BLOCK_K"]
    return {"a": [bm, bk], "b": [bn, bk] if b_layout == NK else [bk, bn], "c": [bm, bn // params["SUBTILE_FACTOR"]]}


def constexprs(params: dict[str, Any], b_layout: str) -> dict[str, Any]:
    return {
        "SchedulerImpl": gluon_impl(params["scheduler"]),
        "num_buffers": params["num_buffers"],
        "SUBTILE_FACTOR": params["SUBTILE_FACTOR"],
        "num_warps": params["num_warps"],
        "B_NK": b_layout == NK,
    }


@functools.lru_cache(maxsize=256)
def _checked_params(config: tuple[tuple[str, Any], ...]) -> dict[str, Any]:
    """_params for a config given as sorted items, checked once."""
    return _params(dict(config))


@functools.cache
def _checked_device(index: int) -> None:
    import torch

    _check_device(torch.device("cuda", index))


def _resolve(a: Any, b: Any, out: Any, config: tuple[tuple[str, Any], ...]) -> tuple[Any, ...]:
    """The full checks and the launch's fixed parts, for a call whose shape class is not cached yet."""
    params = _checked_params(config)  # parameters are checked before the inputs
    layout = validate_gluon_matmul(a, b, out)
    _checked_device(a.device.index if a.device.index is not None else _current_device())
    block_shapes = blocks(params, layout)
    values = constexprs(params, layout)
    variant = (tuple(values.items()), tuple((k, tuple(v)) for k, v in block_shapes.items()), a.dtype)
    grid = persistent_grid(a.shape[0], b.shape[1], params["BLOCK_M"], params["BLOCK_N"], a.device)
    return layout, block_shapes, values, variant, grid


def matmul_blackwell_ws(a: Any, b: Any, bias: Any = None, out: Any = None, **config: Any) -> Any:
    """C = A @ B on data-centre Blackwell. B is a row-major (K, N) tensor or the transposed view of a
    row-major (N, K) weight, read as stored. No bias epilogue: ``bias`` must be None (its
    Requirements refuse a bias, so tkreg.ops never passes one). ``config``: BLOCK_M/N/K,
    num_buffers, SUBTILE_FACTOR, num_warps and ``scheduler`` (a registered name or a Scheduler
    spec); defaults in DEFAULTS."""
    fail_if(refused_bias(bias))
    key = tuple(sorted(config.items()))
    resolved = _resolved.lookup(a, b, out, key)
    if resolved is None:
        resolved = _resolve(a, b, out, key)
        _resolved.store(a, b, out, key, resolved)
    layout, block_shapes, values, variant, grid = resolved
    if out is None:  # (a given out was checked with the inputs)
        out = make_output(a, b)
    # num_warps is one of the kernel's constexprs: no separate launch options.
    _launch(grid, operands(a, b, out, layout), block_shapes, values, {}, variant)
    return out


def _current_device() -> int:
    import torch

    return torch.cuda.current_device()


def matmul_blackwell_ws_aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The compile the launcher makes for ``config`` (descriptors of ``dtype``, the same constexprs;
    B's layout under "b_layout", default "kn")."""
    config = dict(config)
    layout = config.pop("b_layout", KN)
    if layout not in LAYOUTS:
        raise ValueError(f"b_layout={layout!r}; known: {', '.join(LAYOUTS)}")
    params = _params(config)
    signature = descriptor_signatures(dtype, blocks(params, layout))
    values = constexprs(params, layout)
    signature |= {name: "constexpr" for name in values}
    return AotSpec(matmul_blackwell_ws_kernel, signature, values, {"num_warps": params["num_warps"]})
