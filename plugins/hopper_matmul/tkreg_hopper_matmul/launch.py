"""The launcher of ``matmul_hopper_ws`` and its ahead-of-time spec. Both build the kernel from one
:class:`~tkreg_hopper_matmul.config.HopperConfig` through :mod:`.build`, so the AOT compile is the
kernel the launcher runs."""

from __future__ import annotations

from typing import Any

from tkreg_matmul.gluon_common import (
    descriptor_signatures,
    matmul_descriptors,
    num_sms,
    persistent_grid,
    validate_gluon_matmul,
)
from tkreg_matmul.output import output_for

from tkreg import Scheduler
from tkreg.aot import AotSpec
from tkreg.capability import Arch
from tkreg.schedulers import gluon_impl

from . import build
from .config import HopperConfig, choose
from .kernel import matmul_hopper_ws_kernel

# The launcher's tile order when none is given: each program walks one contiguous run of tiles
# (on H100 the Gluon persistence tutorial measured it level with grouped orders at 8192^2).
DEFAULT_SCHEDULER = "persistent"
ARCH = "sm_90a"


def matmul_hopper_ws(a: Any, b: Any, out: Any = None, *, scheduler: str | Scheduler | None = None, **params: Any) -> Any:
    """C = A @ B on an H100 (sm_90a). A (M, K), B (K, N): fp16 or bf16 CUDA tensors meeting TMA's
    layout rules (contiguous last dimension, 16-byte aligned base and row strides). ``out``, if
    given, must be a TMA-legal (M, N) tensor of the same dtype; one allocated here is contiguous,
    so N must be a multiple of 8. ``params`` are HopperConfig fields."""
    # Given parameters (missing ones take the defaults) are checked before the inputs; with none,
    # the launcher chooses for the problem size.
    config = HopperConfig.from_params(params) if params else None
    validate_gluon_matmul(a, b, out)
    M, N = a.shape[0], b.shape[1]
    if config is None:
        config = choose(M, N, num_sms(a.device))
    out = output_for(a, b, out)
    descriptors = matmul_descriptors(a, b, out, **build.blocks(config))
    grid = persistent_grid(M, N, config.BLOCK_M, config.BLOCK_N, a.device)
    impl = gluon_impl(scheduler if scheduler is not None else DEFAULT_SCHEDULER)
    matmul_hopper_ws_kernel[grid](*descriptors, **build.constexprs(config, impl), **build.options())
    return out


def aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The compile the launcher would run for ``config`` (a scheduler name or spec under
    "scheduler", the rest HopperConfig fields) with ``dtype`` operands."""
    if arch.name != ARCH:
        raise ValueError(f"matmul_hopper_ws is built for {ARCH} only (wgmma exists on 9.0 alone), not {arch.name}")
    params = dict(config)
    scheduler = params.pop("scheduler", DEFAULT_SCHEDULER)
    hopper = HopperConfig.from_params(params)
    signature = descriptor_signatures(dtype, **build.blocks(hopper))
    constexprs = build.constexprs(hopper, gluon_impl(scheduler))
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return AotSpec(matmul_hopper_ws_kernel, signature, constexprs, build.options())
