"""Host side of the two TMA add kernels: resolving and checking a tile config, building the
descriptors, the grid, the launch and the ahead-of-time spec. Every check runs before
anything touches CUDA, so bad inputs and configs fail the same way on a machine with no GPU.

Host time per call matters at small sizes (notes/tuning.md, "Host time per call"),
so what does not change between calls is kept: launch plans per (dtype, params) with their
tkreg.launch.fastlaunch launcher, the plan and grid per input shape, the SM count, and the TMA
descriptors (tkreg.launch.tma.descriptor)."""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tkreg.core import bounded, dtypes
from tkreg.launch.aot import AotSpec
from tkreg.launch.fastlaunch import BoundLaunch, Launcher
from tkreg.launch.tma import descriptor, descriptor_signature

from .add_checks import checked_output, tma_inputs_key
from .tma_tiles import register_layout

# Shared memory one block may claim on sm_90 and sm_100 (cudaDevAttrMaxSharedMemoryPerBlockOptin,
# 227 KiB; CUDA C Programming Guide, "Compute capabilities" table).
SMEM_PER_BLOCK = 227 * 1024
# One 8-byte mbarrier per pipeline slot, rounded up generously for alignment.
MBARRIER_BYTES = 16
# TMA box limits (CUDA driver API, cuTensorMapEncodeTiled): every box dimension at most 256
# elements, the inner one at least 16 bytes.
TMA_BOX_MAX = 256
TMA_INNER_MIN_BYTES = 16
# Parameters every TMA add kernel takes, besides its buffer counts.
TILE_PARAMS = ("XBLOCK", "YBLOCK", "num_warps", "tiles_per_program", "swizzle")
# NVMMA swizzle widths in bytes (0: none). A swizzled TMA box is at most one swizzle wide, so a
# wider tile row costs several copies; only the tensor cores need swizzling.
SWIZZLES = (0, 32, 64, 128)


@dataclass(frozen=True)
class LaunchPlan:
    """A resolved config with its TMA box, shared layout, launch keywords (constexprs,
    num_warps, compile options) and the launcher (tkreg.launch.fastlaunch) that fixes them."""

    config: Mapping[str, Any]
    block: tuple[int, int]
    layout: Any
    options: Mapping[str, Any]
    launcher: Launcher


# Below this many runs of tiles per SM, an input gets one tile per program: more, shorter programs
# keep every SM busy (1024^2 fp32 in 16 KB tiles is 256 tiles: 86 runs of 3 for 132 SMs).
RUNS_PER_SM = 4
# (kernel name, dtype, sorted params) -> LaunchPlan; a handful of entries per process.
_PLANS: dict[tuple[Any, ...], LaunchPlan] = {}
# (kernel name, dtype, M, N, device index, params) -> (LaunchPlan, grid): what launch() decides
# for an input, oldest dropped first beyond SHAPE_PLANS entries.
SHAPE_PLANS = 1024
_SHAPE_PLANS: dict[tuple[Any, ...], tuple[LaunchPlan, tuple[int]]] = {}
# (kernel name, add_checks.tma_inputs_key, params) -> (bound launch, grid): the whole launch of a
# repeated call, descriptors included (each holds an address, no tensor); oldest dropped first.
BOUND_LAUNCHES = 256
_BOUND: dict[tuple[Any, ...], tuple[BoundLaunch, tuple[int]]] = {}


@dataclass(frozen=True)
class TmaAddKernel:
    """What differs between the TMA add kernels: the jitted kernel, its defaults per item size,
    the parameter naming its load slots, the num_warps it allows and extra compile options."""

    name: str
    fn: Any
    defaults: Mapping[int, Mapping[str, int]]
    load_buffers: str
    warps: tuple[int, ...]
    constexprs: Mapping[str, Any]  # fixed constexpr arguments beyond the tile config
    options: Mapping[str, Any]  # extra compile options (maxnreg, ...)

    def resolve(self, dtype: str, given: Mapping[str, Any]) -> dict[str, Any]:
        """The dtype's default overridden by the parameters given (None = default); ValueError
        for parameters TMA, shared memory or the kernel cannot take. Slot counts are capped at
        tiles_per_program: a program never has more tiles in flight than it handles."""
        known = (*TILE_PARAMS, self.load_buffers, "num_store_buffers")
        unknown = sorted(set(given) - set(known))
        if unknown:
            raise ValueError(f"{self.name}: unknown parameters {unknown}; known: {', '.join(known)}")
        config = {**self.defaults[dtypes.ITEMSIZE[dtype]], **{k: v for k, v in given.items() if v is not None}}
        problems = [
            f"{k} must be an integer >= 1, got {config[k]!r}"
            for k in (self.load_buffers, "num_store_buffers", "tiles_per_program")
            if not isinstance(config[k], int) or config[k] < 1
        ]
        if not problems:
            for k in (self.load_buffers, "num_store_buffers"):
                config[k] = min(config[k], config["tiles_per_program"])
        if config["num_warps"] not in self.warps:
            problems.append(f"num_warps must be one of {self.warps}, got {config['num_warps']!r}")
        if config["swizzle"] not in SWIZZLES:
            problems.append(f"swizzle must be one of {SWIZZLES} (bytes), got {config['swizzle']!r}")
        if not problems:
            problems = _tile_problems(dtype, config, smem_tiles=2 * config[self.load_buffers] + config["num_store_buffers"])
        if problems:
            raise ValueError(f"{self.name}: bad config {config}: " + "; ".join(problems))
        return config

    def kernel_args(self, dtype: str, config: Mapping[str, Any]) -> dict[str, Any]:
        """Constexpr arguments for a resolved config."""
        layout = register_layout(dtypes.ITEMSIZE[dtype], config["YBLOCK"], config["num_warps"])
        buffers = {k: config[k] for k in (self.load_buffers, "num_store_buffers")}
        return {"XBLOCK": config["XBLOCK"], "YBLOCK": config["YBLOCK"], **buffers, "layout": layout, **self.constexprs}

    def plan(self, dtype: str, params: Mapping[str, Any]) -> LaunchPlan:
        """resolve() and everything derived from it, computed once per (dtype, params): on small
        inputs the launcher's host work, not the GPU, sets the pace."""
        try:
            key = (self.name, dtype, tuple(sorted(params.items())))
            return _PLANS[key]
        except TypeError:  # an unhashable parameter value: resolve() explains what is wrong
            key = None
        except KeyError:
            pass
        config = self.resolve(dtype, params)
        options = {**self.kernel_args(dtype, config), "num_warps": config["num_warps"], **self.options}
        block = (config["XBLOCK"], config["YBLOCK"])
        plan = LaunchPlan(config, block, smem_layout(dtype, config), options, Launcher(self.fn, **options))
        if key is not None:
            _PLANS[key] = plan
        return plan

    def shape_plan(
        self, dtype: Any, m: int, n: int, device_index: int | None, params: Mapping[str, Any]
    ) -> tuple[LaunchPlan, tuple[int]]:
        """The plan and grid launch() uses for an (m, n) input of torch ``dtype`` on a device:
        unless tiles_per_program is given, an input too small to give every SM RUNS_PER_SM runs
        of the default length gets one tile per program (and one slot of each kind). Cached."""
        try:
            key = (self.name, dtype, m, n, device_index, *params.items())
            return _SHAPE_PLANS[key]
        except TypeError:  # an unhashable parameter value: plan() explains what is wrong
            key = None
        except KeyError:
            pass
        name = dtypes.name_of(dtype)
        plan = self.plan(name, params)
        programs = grid(m, n, plan.config)
        if params.get("tiles_per_program") is None and programs[0] < RUNS_PER_SM * sm_count(device_index):
            plan = self.plan(name, {**params, "tiles_per_program": 1})
            programs = grid(m, n, plan.config)
        if key is not None:
            bounded.put(_SHAPE_PLANS, key, (plan, programs), SHAPE_PLANS)
        return plan, programs

    def launch(self, a: Any, b: Any, out: Any, params: Mapping[str, Any]) -> Any:
        """Check everything, then run out = a + b (out allocated when None). A call whose
        inputs match an earlier one's in everything the checks, the plan and the descriptors
        read (add_checks.tma_inputs_key) repeats that launch as it was prepared."""
        if out is None:
            out = checked_output(a, b, None, interpretable=False, tma=True)
        inputs_key = tma_inputs_key(a, b, out)
        if inputs_key is None:  # not plainly valid: the full checks say why (or let it through)
            checked_output(a, b, out, interpretable=False, tma=True)
            bound, programs = self._bound_launch(a, b, out, params)
            bound(programs)
            return out
        key = (self.name, inputs_key, *params.items())
        try:
            bound, programs = _BOUND[key]
        except TypeError:  # an unhashable parameter value: plan() explains what is wrong
            bound, programs = self._bound_launch(a, b, out, params)
        except KeyError:
            bound, programs = bounded.put(_BOUND, key, self._bound_launch(a, b, out, params), BOUND_LAUNCHES)
        bound(programs)
        return out

    def _bound_launch(self, a: Any, b: Any, out: Any, params: Mapping[str, Any]) -> tuple[BoundLaunch, tuple[int]]:
        """The launch of out = a + b for checked inputs: plan, grid and TMA descriptors."""
        m, n = a.shape
        plan, programs = self.shape_plan(a.dtype, m, n, a.device.index, params)
        # the checks have checked TMA's rules on all three tensors
        block, layout = plan.block, plan.layout
        descs = [descriptor(t, block, name, layout, checked=True) for t, name in ((a, "a"), (b, "b"), (out, "out"))]
        return plan.launcher.bind(*descs, m, n, plan.config["tiles_per_program"]), programs

    def aot(self, dtype: str, given: Mapping[str, Any]) -> AotSpec:
        """What launch compiles for ``given`` (the kernels do not specialize on M and N, so one
        compile serves every shape)."""
        config = self.resolve(dtype, given)
        args = self.kernel_args(dtype, config)
        desc = descriptor_signature(dtype, [config["XBLOCK"], config["YBLOCK"]], smem_layout(dtype, config))
        signature = {"a_desc": desc, "b_desc": desc, "c_desc": desc, "M": "i32", "N": "i32", "per_program": "i32"}
        return AotSpec(
            fn=self.fn,
            signature={**signature, **dict.fromkeys(args, "constexpr")},
            constexprs=args,
            options={"num_warps": config["num_warps"], **self.options},
        )


def smem_layout(dtype: str, config: Mapping[str, Any]) -> Any:
    """The shared-memory layout of a config's tiles (TMA's box follows it)."""
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout(swizzle_byte_width=config["swizzle"], element_bitwidth=8 * dtypes.ITEMSIZE[dtype], rank=2)


def _tile_problems(dtype: str, config: Mapping[str, Any], smem_tiles: int) -> list[str]:
    """What TMA or shared memory cannot take in a tile config; ``smem_tiles`` is how many
    (XBLOCK, YBLOCK) tiles the kernel keeps in shared memory."""
    xblock, yblock = config["XBLOCK"], config["YBLOCK"]
    itemsize = dtypes.ITEMSIZE[dtype]
    problems = [
        f"{name} must be a power of two <= {TMA_BOX_MAX} (a TMA box dimension), got {value!r}"
        for name, value in (("XBLOCK", xblock), ("YBLOCK", yblock))
        if not isinstance(value, int) or value < 1 or value & (value - 1) or value > TMA_BOX_MAX
    ]
    if problems:
        return problems
    if yblock * itemsize < TMA_INNER_MIN_BYTES:
        return [f"YBLOCK={yblock} {dtype} is {yblock * itemsize} bytes; a TMA box row needs >= {TMA_INNER_MIN_BYTES}"]
    if yblock * itemsize < config["swizzle"]:
        row = f"YBLOCK={yblock} {dtype} is {yblock * itemsize} bytes"
        return [f"swizzle={config['swizzle']} needs tile rows of at least that many bytes; {row}"]
    smem = smem_tiles * (xblock * yblock * itemsize + MBARRIER_BYTES)
    if smem > SMEM_PER_BLOCK:
        tiles = f"{smem_tiles} tiles of {xblock}x{yblock} {dtype}"
        return [f"{tiles} need {smem} bytes of shared memory; a block has {SMEM_PER_BLOCK}"]
    return []


def grid(m: int, n: int, config: Mapping[str, Any]) -> tuple[int]:
    """One program per run of tiles_per_program consecutive tiles (tkreg_elementwise.tma_tiles)."""
    tiles = -(-m // config["XBLOCK"]) * -(-n // config["YBLOCK"])
    return (-(-tiles // config["tiles_per_program"]),)


@functools.cache
def sm_count(device_index: int | None) -> int:
    import torch

    index = device_index if device_index is not None else torch.cuda.current_device()
    return torch.cuda.get_device_properties(index).multi_processor_count
