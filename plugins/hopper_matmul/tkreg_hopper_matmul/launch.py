"""The launcher of ``matmul_hopper_ws`` and its ahead-of-time spec. Both build the kernel from one
:class:`~tkreg_hopper_matmul.config.HopperConfig` and B layout through :mod:`.build`, so the AOT
compile is the kernel the launcher runs.

A call checks its inputs (the full checks once per shape class, then only the addresses'
alignment), takes a :class:`Plan` (config, scheduler, K slices, grid, TMA block shapes,
constexprs), made once per problem shape class and cached, and launches it through
:class:`tkreg_matmul.gluon_common.GluonLaunch` (tkreg.launch.fastlaunch: a compiled variant's launcher,
and per set of tensors a bound launch over cached descriptors).

A bias (N,) is checked with the inputs (a bias's dtype, shape, stride and device are part of the
shape class) and passed to the kernel as a pointer, which adds it to the fp32 accumulator in its
epilogue; without one the kernel gets None and compiles without bias code. With split-K the
kernel gets None and :func:`tkreg_matmul.reduce.reduce_partials` adds the bias once, after the
partial sums.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from tkreg_matmul.checks import bias_reasons
from tkreg_matmul.gluon_common import (
    GluonLaunch,
    ShapeClassCache,
    descriptor_signatures,
    num_sms,
    operands,
    validate_gluon_matmul,
)
from tkreg_matmul.layouts import KN, LAYOUTS
from tkreg_matmul.op import make_output
from tkreg_matmul.reduce import reduce_partials

from tkreg import Scheduler
from tkreg.core.capability import Arch
from tkreg.core.schedulers import gluon_impl
from tkreg.launch.aot import AotSpec
from tkreg.launch.inputs import device_reasons, fail_if
from tkreg.launch.tma import TRITON_TYPE

from . import build
from .choice import choose
from .config import HopperConfig, effective_split_k
from .kernel import matmul_hopper_ws_kernel

# The tile order for explicit parameters given without one (the launcher's own choice names its
# scheduler): grouped-8 measured best or within 2% of the best on the shapes of the Llama-3-8B projection suite.
DEFAULT_SCHEDULER = "grouped-8"
ARCH = "sm_90a"
OPTIONS = build.options()
_launch = GluonLaunch(matmul_hopper_ws_kernel)
# Per shape class (inputs' dtypes, shapes, strides, devices) and parameters: (B layout, plan, variant).
_resolved = ShapeClassCache()


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

    def variant(self, dtype: Any) -> Any:
        """What decides the compiled kernel, with the device: constexprs, block shapes, operand dtype
        (C's follows: fp32 with split-K, else the operands')."""
        return (tuple(self.constexprs.items()), tuple((k, tuple(v)) for k, v in self.blocks.items()), dtype)


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


def matmul_hopper_ws(a: Any, b: Any, bias: Any = None, out: Any = None, *, scheduler: str | Scheduler | None = None,
                     **params: Any) -> Any:  # fmt: skip
    """C = A @ B (+ bias) on an H100 (sm_90a). A (M, K): fp16 or bf16 CUDA tensor meeting TMA's
    layout rules (contiguous last dimension, 16-byte aligned base and row stride). B (K, N):
    row-major like A, or the transposed view of a row-major (N, K) weight (``x @ W.t()``), read as
    stored. ``bias``: None, or a contiguous (N,) tensor of A's dtype on A's device, added to every
    row of C in fp32 before the one rounding to C's dtype, so ``matmul_hopper_ws(x, W.t(), b)`` is
    ``F.linear(x, W, b)``: in the kernel's epilogue, or with split-K once in the reduce kernel
    (never to every partial sum); any other bias is refused with an InputError. ``out``, if
    given, must be a TMA-legal (M, N) tensor of the same dtype; one allocated here is contiguous,
    so N must be a multiple of 8. ``params`` are HopperConfig fields; with none, the launcher
    chooses them (and the scheduler) for the problem (:func:`.choice.choose`)."""
    extra = (tuple(sorted(params.items())), scheduler) if params or scheduler is not None else None
    resolved = _resolved.lookup(a, b, out, extra, bias)
    if resolved is None:
        resolved = _resolve(a, b, bias, out, params, scheduler)
        _resolved.store(a, b, out, extra, resolved, bias)
    layout, plan, variant = resolved
    if out is None:  # (a given out was checked with the inputs)
        out = make_output(a, b)
    if plan.split_k == 1:
        _launch(plan.grid, operands(a, b, out, layout), plan.blocks, plan.constexprs, OPTIONS, variant, (bias,))
        return out
    import torch

    workspace = torch.empty((plan.split_k, a.shape[0], b.shape[1]), dtype=torch.float32, device=a.device)
    # The partial sums carry no bias: the reduce kernel adds it once, after the last slice.
    _launch(plan.grid, operands(a, b, workspace, layout), plan.blocks, plan.constexprs, OPTIONS, variant, (None,))
    return reduce_partials(workspace, out, bias)


def _resolve(a: Any, b: Any, bias: Any, out: Any, params: dict[str, Any],
             scheduler: str | Scheduler | None) -> tuple[str, Plan, Any]:  # fmt: skip
    """The full checks and the plan, for a call whose shape class is not cached yet."""
    # Given parameters (missing ones take the defaults) are checked before the inputs.
    config = config_from(tuple(sorted(params.items()))) if params else None
    layout = validate_gluon_matmul(a, b, out)
    if bias is not None:
        # The kernel (or the reduce kernel) loads N elements of A's dtype from bias's address.
        fail_if(bias_reasons(a, b, bias))
        fail_if(device_reasons([("a", a), ("bias", bias)], interpretable=False))
    M, K = a.shape
    plan = launch_plan(M, b.shape[1], K, layout, num_sms(a.device), config, scheduler)
    return layout, plan, plan.variant(a.dtype)


def aot(arch: Arch, dtype: str, config: dict[str, Any]) -> AotSpec:
    """The compile the launcher would run for ``config`` (a scheduler name or spec under
    "scheduler", B's layout under "b_layout" (default "kn"), whether a bias is passed under "bias"
    (default False), the rest HopperConfig fields) with ``dtype`` operands. SPLIT_K > 1 compiles
    the split-K kernel (its fp32 workspace store), which takes no bias whatever "bias" says: the
    reduce kernel adds it. A bias is a 16-byte aligned pointer, as torch allocates one."""
    if arch.name != ARCH:
        raise ValueError(f"matmul_hopper_ws is built for {ARCH} only (wgmma exists on 9.0 alone), not {arch.name}")
    params = dict(config)
    scheduler = params.pop("scheduler", DEFAULT_SCHEDULER)
    layout = params.pop("b_layout", KN)
    with_bias = params.pop("bias", False)
    if layout not in LAYOUTS:
        raise ValueError(f"b_layout={layout!r}; known: {', '.join(LAYOUTS)}")
    if not isinstance(with_bias, bool):
        raise ValueError(f"bias={with_bias!r}; must be True or False")
    hopper = HopperConfig.from_params(params)
    c_dtype = "float32" if hopper.SPLIT_K > 1 else dtype
    signature = descriptor_signatures(dtype, build.blocks(hopper, layout), c_dtype)
    constexprs: dict[str, Any] = build.constexprs(hopper, gluon_impl(scheduler), layout)
    aligned: tuple[str, ...] = ()
    if with_bias and hopper.SPLIT_K == 1:
        signature["bias_ptr"] = f"*{TRITON_TYPE[dtype]}"
        aligned = ("bias_ptr",)
    else:
        constexprs = {"bias_ptr": None, **constexprs}
    signature.update(dict.fromkeys(constexprs, "constexpr"))
    return AotSpec(matmul_hopper_ws_kernel, signature, constexprs, build.options(), aligned)
