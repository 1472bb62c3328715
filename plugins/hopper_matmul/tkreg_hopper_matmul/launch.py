"""The launcher of ``matmul_hopper_ws`` and its ahead-of-time spec. Both build the kernel from one
:class:`~tkreg_hopper_matmul.config.HopperConfig` and B layout through :mod:`.build`, so the AOT
compile is the kernel the launcher runs.

A call checks its inputs, then takes a :class:`Plan` (config, scheduler, K slices, grid, TMA block
shapes, constexprs), made once per problem shape class and cached, and launches it.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tkreg_matmul.gluon_common import (
    descriptor_signatures,
    launch_gluon,
    matmul_descriptors,
    num_sms,
    validate_gluon_matmul,
)
from tkreg_matmul.layouts import KN, LAYOUTS
from tkreg_matmul.output import output_for
from tkreg_matmul.reduce import reduce_partials

from tkreg import Scheduler
from tkreg.aot import AotSpec
from tkreg.capability import Arch
from tkreg.schedulers import gluon_impl

from . import build
from .choice import choose
from .config import HopperConfig, effective_split_k
from .kernel import matmul_hopper_ws_kernel

# The tile order for explicit parameters given without one (the launcher's own choice names its
# scheduler): grouped-8 measured best or within 2% of the best on the shapes of issue 13.
DEFAULT_SCHEDULER = "grouped-8"
ARCH = "sm_90a"


@dataclass(frozen=True)
class Plan:
    """Everything about a launch that depends on the problem's shape class, not on its tensors."""

    config: HopperConfig
    scheduler: str | Scheduler
    layout: str
    split_k: int
    grid: tuple[int]
    blocks: Mapping[str, list[int]]
    constexprs: Mapping[str, Any]
    why: str  # where the config comes from: given, measured, or the model


@functools.lru_cache(maxsize=256)
def config_from(params: tuple[tuple[str, Any], ...]) -> HopperConfig:
    """HopperConfig.from_params, checked once per distinct parameter set."""
    return HopperConfig.from_params(dict(params))


@functools.lru_cache(maxsize=4096)
def launch_plan(
    M: int, N: int, K: int, layout: str, sms: int, config: HopperConfig | None, scheduler: str | Scheduler | None
) -> Plan:
    """The launch for C = A @ B, A (M, K), B (K, N) in ``layout``, on ``sms`` SMs: ``config`` (None:
    the launcher's choice, :func:`.choice.choose`, which also names a scheduler) with ``scheduler``
    (None: the choice's, or DEFAULT_SCHEDULER for a given config)."""
    if config is None:
        pick = choose(M, N, K, layout, sms)
        config, why = pick.config, pick.why
        scheduler = scheduler if scheduler is not None else pick.scheduler
    else:
        why = "given"
    scheduler = scheduler if scheduler is not None else DEFAULT_SCHEDULER
    split_k = effective_split_k(K, config)
    if split_k != config.SPLIT_K:
        config = replace(config, SPLIT_K=split_k)
    units = -(-M // config.BLOCK_M) * -(-N // config.BLOCK_N) * split_k
    return Plan(
        config,
        scheduler,
        layout,
        split_k,
        (min(sms, units),),
        build.blocks(config, layout),
        build.constexprs(config, gluon_impl(scheduler), layout),
        why,
    )


def matmul_hopper_ws(a: Any, b: Any, out: Any = None, *, scheduler: str | Scheduler | None = None, **params: Any) -> Any:
    """C = A @ B on an H100 (sm_90a). A (M, K): fp16 or bf16 CUDA tensor meeting TMA's layout rules
    (contiguous last dimension, 16-byte aligned base and row stride). B (K, N): row-major like A, or
    the transposed view of a row-major (N, K) weight (``x @ W.t()``), read as stored. ``out``, if
    given, must be a TMA-legal (M, N) tensor of the same dtype; one allocated here is contiguous,
    so N must be a multiple of 8. ``params`` are HopperConfig fields; with none, the launcher
    chooses them (and the scheduler) for the problem (:func:`.choice.choose`)."""
    # Given parameters (missing ones take the defaults) are checked before the inputs.
    config = config_from(tuple(sorted(params.items()))) if params else None
    layout = validate_gluon_matmul(a, b, out)
    M, K = a.shape
    N = b.shape[1]
    plan = launch_plan(M, N, K, layout, num_sms(a.device), config, scheduler)
    out = output_for(a, b, out)
    if plan.split_k == 1:
        launch_gluon(matmul_hopper_ws_kernel, plan.grid, matmul_descriptors(a, b, out, plan.blocks, layout), plan.constexprs,
                     build.options())  # fmt: skip
        return out
    import torch

    workspace = torch.empty((plan.split_k, M, N), dtype=torch.float32, device=a.device)
    descriptors = matmul_descriptors(a, b, workspace, plan.blocks, layout)
    launch_gluon(matmul_hopper_ws_kernel, plan.grid, descriptors, plan.constexprs, build.options())
    return reduce_partials(workspace, out)


def aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The compile the launcher would run for ``config`` (a scheduler name or spec under
    "scheduler", B's layout under "b_layout" (default "kn"), the rest HopperConfig fields) with
    ``dtype`` operands. SPLIT_K > 1 compiles the split-K kernel (its fp32 workspace store)."""
    if arch.name != ARCH:
        raise ValueError(f"matmul_hopper_ws is built for {ARCH} only (wgmma exists on 9.0 alone), not {arch.name}")
    params = dict(config)
    scheduler = params.pop("scheduler", DEFAULT_SCHEDULER)
    layout = params.pop("b_layout", KN)
    if layout not in LAYOUTS:
        raise ValueError(f"b_layout={layout!r}; known: {', '.join(LAYOUTS)}")
    hopper = HopperConfig.from_params(params)
    c_dtype = "float32" if hopper.SPLIT_K > 1 else dtype
    signature = descriptor_signatures(dtype, build.blocks(hopper, layout), c_dtype)
    constexprs = build.constexprs(hopper, gluon_impl(scheduler), layout)
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return AotSpec(matmul_hopper_ws_kernel, signature, constexprs, build.options())
