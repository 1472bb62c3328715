"""Launchers of the norm kernels (forward and backward, rms_norm and layer_norm) and their
ahead-of-time compile specs.

Host cost. A decode step normalizes one row of 4096: the kernel takes a few microseconds, so what
the launcher does in Python is most of the call's cost. A forward call without a config first
tries :func:`_plain_rows`: attribute reads that suffice for the full checks (:mod:`.checks`) to
pass (tkreg.launch.inputs, "Fast checks"), returning the launch's sizes and strides as it goes;
then a plan cached per (row width, dtype) launches through tkreg.launch.fastlaunch, which skips
triton's per-call binding once a specialization has run. Anything the fast path does not accept,
any config, and the first call of a row width take the slow path: the full checks, which name
everything wrong, and the plan. Row strides and alignment need no key of ours: triton specializes
on them and fastlaunch keys on triton's specialization. So do absent inputs: a None weight, bias or
gradient is passed to the kernel as None, which triton specializes as a constexpr (a compiled
kernel of its own, and a Launcher entry of its own).
"""

from __future__ import annotations

import functools
from typing import Any

import torch

from tkreg.launch import inputs as launch_inputs
from tkreg.launch.aot import AotSpec
from tkreg.launch.fastlaunch import Launcher
from tkreg.launch.inputs import fail_if
from tkreg.launch.tma import TRITON_TYPE

from . import checks, kernels, plans

_TENSOR = torch.Tensor
_PLAIN = (torch.Tensor, torch.nn.Parameter)  # weights are often Parameters
_FLOATS = frozenset((torch.float32, torch.float16, torch.bfloat16))
_F32 = torch.float32


# -- fast checks ----------------------------------------------------------------------------------


def _fast_device(x: Any) -> int | None:
    """x's device index when it is a device the fast path takes (FAST_DEVICE_TYPE: CUDA, or the
    CPU in tests of the fast checks), else None. ``is_cuda`` costs a fifth of ``device.type``."""
    if x.is_cuda or (launch_inputs.FAST_DEVICE_TYPE == "cpu" and x.is_cpu):
        return x.get_device()
    return None


def _plain_vector(v: Any, n: int, device: int) -> bool:
    """A weight or bias plainly passes its checks: absent (None), or a contiguous float tensor of
    N on the device."""
    return v is None or (type(v) in _PLAIN and v.dtype in _FLOATS and v.shape == (n,) and v.is_contiguous()
                         and v.get_device() == device)


def _plain_rows(x: Any, w: Any, y: Any, rstd: Any) -> tuple[int, int, int, int, int] | None:
    """(M, N, x's row stride, y's row stride, device index) when x, w, y and rstd plainly pass
    their full checks (checks.forward_reasons): plain tensors on one fast device, 2-D x and y of
    one shape and a float dtype with unit column stride, y's rows not overlapping, a contiguous
    float weight of N or none, a contiguous fp32 rstd of (M, 1). None: run the full checks."""
    if type(x) is not _TENSOR or type(y) is not _TENSOR or type(rstd) is not _TENSOR:
        return None
    shape = x.shape
    if len(shape) != 2:
        return None
    m, n = shape
    dtype = x.dtype
    if (not m or not n or n > checks.MAX_N or dtype not in _FLOATS or y.dtype is not dtype or rstd.dtype is not _F32
            or y.shape != shape or rstd.shape != (m, 1) or not rstd.is_contiguous()):
        return None
    sx, cx = x.stride()
    sy, cy = y.stride()
    if cx != 1 or cy != 1 or (sy < n and m > 1):
        return None
    device = _fast_device(x)
    if device is None or y.get_device() != device or rstd.get_device() != device or not _plain_vector(w, n, device):
        return None
    return m, n, sx, sy, device


def _plain_layer(b: Any, mean: Any, m: int, n: int, device: int) -> bool:
    """The bias (or none) and mean of layer_norm plainly pass their checks (the rest passed
    _plain_rows)."""
    return (type(mean) is _TENSOR and mean.dtype is _F32 and mean.shape == (m, 1) and mean.is_contiguous()
            and mean.get_device() == device and _plain_vector(b, n, device))


def _plain_grad(g: Any, v: Any, n: int, device: int) -> bool:
    """The gradient of a weight or bias ``v`` plainly passes its checks: None where ``v`` is absent,
    else a contiguous tensor of v's dtype and N elements on the device."""
    if v is None:
        return g is None
    return type(g) is _TENSOR and g.dtype is v.dtype and g.shape == (n,) and g.is_contiguous() and g.get_device() == device


def _plain_grads(dy: Any, dw: Any, db: Any, w: Any, b: Any, shape: Any, n: int, device: int) -> bool:
    """grad_y and the weight (bias) gradients plainly pass their checks (checks.backward_reasons)."""
    if (type(dy) is not _TENSOR or dy.dtype not in _FLOATS or dy.shape != shape or dy.stride(1) != 1
            or dy.get_device() != device):
        return False
    return _plain_grad(dw, w, n, device) and _plain_grad(db, b, n, device)


# -- plans and launchers --------------------------------------------------------------------------

_LAUNCHERS: dict[tuple[Any, ...], Launcher] = {}
# Forward plans of the launcher's own choice, per (op, N, dtype): (launch, rows per program or 0
# for the looped kernel). Filled by the slow path, read by the fast one.
_FAST_FORWARD: dict[tuple[bool, int, Any], tuple[Launcher, int]] = {}


def _launcher(fn: Any, num_warps: int, **constexprs: Any) -> Launcher:
    """One Launcher per kernel and fixed parameters (a handful per process; plain-value keys:
    hashing a JITFunction hashes its source)."""
    key = (fn.__name__, num_warps, *sorted(constexprs.items()))
    launch = _LAUNCHERS.get(key)
    if launch is None:
        launch = _LAUNCHERS[key] = Launcher(fn, num_warps=num_warps, **constexprs)
    return launch


def _forward_launch(layer: bool, n: int, itemsize: int, block: int | None, rows: int | None,
                    num_warps: int | None) -> tuple[Launcher, int]:
    plan = plans.forward_plan(n, itemsize, block, rows, num_warps)
    if plan.looped:
        fn = kernels.ln_fwd_looped if layer else kernels.rms_fwd_looped
        return _launcher(fn, plan.num_warps, BLOCK_N=plan.block_n), 0
    fn = kernels.ln_fwd_fused if layer else kernels.rms_fwd_fused
    return _launcher(fn, plan.num_warps, ROWS=plan.rows, BLOCK_N=plan.block_n), plan.rows


@functools.cache
def _sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


def _forward_slow(layer: bool, x: Any, w: Any, b: Any, out: Any, eps: Any, block: int | None, rows: int | None,
                  num_warps: int | None) -> Any:
    """Full checks, the plan (remembered for the fast path when no config is given), launch."""
    fail_if(checks.forward_reasons(x, w, b, out, eps, layer=layer))
    y, rstd = out[0], out[-1]
    m, n = x.shape
    default = block is None and rows is None and num_warps is None
    key = (layer, n, x.dtype)
    found = _FAST_FORWARD.get(key) if default else None
    if found is None:
        found = _forward_launch(layer, n, x.element_size(), block, rows, num_warps)
        if default:
            _FAST_FORWARD[key] = found
    launch, per_program = found
    head = (x, w, b, y, out[1], rstd) if layer else (x, w, y, rstd)
    if per_program:
        launch((-(-m // per_program),), *head, m, n, x.stride(0), y.stride(0), float(eps))
    else:
        launch((m,), *head, n, x.stride(0), y.stride(0), float(eps))
    return out


def rms_norm_forward(x: Any, weight: Any, *, out: Any, eps: float, BLOCK: int | None = None, ROWS: int | None = None,
                     num_warps: int | None = None) -> Any:
    """y = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps) per row, written into
    out = (y, rstd). x (M, N) with unit column stride; weight (N,) contiguous, or None (ones,
    never read). Config (tests): BLOCK, the widest row kept whole (longer rows loop over BLOCK
    chunks), ROWS per program, num_warps."""
    if BLOCK is None and ROWS is None and num_warps is None and type(out) is tuple and len(out) == 2 \
            and type(eps) is float:
        y, rstd = out
        sizes = _plain_rows(x, weight, y, rstd)
        if sizes is not None:
            m, n, sx, sy, _ = sizes
            found = _FAST_FORWARD.get((False, n, x.dtype))
            if found is not None:
                launch, per_program = found
                if per_program:
                    launch(((m + per_program - 1) // per_program,), x, weight, y, rstd, m, n, sx, sy, eps)
                else:
                    launch((m,), x, weight, y, rstd, n, sx, sy, eps)
                return out
    return _forward_slow(False, x, weight, None, out, eps, BLOCK, ROWS, num_warps)


def layer_norm_forward(x: Any, weight: Any, bias: Any, *, out: Any, eps: float, BLOCK: int | None = None,
                       ROWS: int | None = None, num_warps: int | None = None) -> Any:
    """y = (x - mean) * rstd * weight + bias per row, rstd = 1 / sqrt(var + eps), written into
    out = (y, mean, rstd). The weight and the bias may each be None (ones, zeros: never read)."""
    if BLOCK is None and ROWS is None and num_warps is None and type(out) is tuple and len(out) == 3 \
            and type(eps) is float:
        y, mean, rstd = out
        sizes = _plain_rows(x, weight, y, rstd)
        if sizes is not None:
            m, n, sx, sy, device = sizes
            found = _FAST_FORWARD.get((True, n, x.dtype))
            if found is not None and _plain_layer(bias, mean, m, n, device):
                launch, per_program = found
                if per_program:
                    launch(((m + per_program - 1) // per_program,), x, weight, bias, y, mean, rstd, m, n, sx, sy, eps)
                else:
                    launch((m,), x, weight, bias, y, mean, rstd, n, sx, sy, eps)
                return out
    return _forward_slow(True, x, weight, bias, out, eps, BLOCK, ROWS, num_warps)


def _backward(layer: bool, x: Any, w: Any, b: Any, mean: Any, rstd: Any, dy: Any, out: Any, block: int | None,
              rows: int | None, programs: int | None, num_warps: int | None) -> Any:
    sizes = None
    if block is None and rows is None and programs is None and num_warps is None and type(out) is tuple \
            and len(out) == (3 if layer else 2):
        sizes = _plain_rows(x, w, out[0], rstd)
        if sizes is not None:
            m, n, _, _, device = sizes
            if not (_plain_grads(dy, out[1], out[-1] if layer else None, w, b, x.shape, n, device)
                    and (not layer or _plain_layer(b, mean, m, n, device))):
                sizes = None
    if sizes is None:
        fail_if(checks.backward_reasons(x, w, b, mean, rstd, dy, out, layer=layer))
        device = x.get_device()
    m, n = x.shape
    dx, dw = out[0], out[1]
    # rms_norm has no bias gradient (None: never formed) and no mean (never read: LAYER=False).
    db = out[2] if layer else None
    mean = mean if layer else rstd
    if sizes is None:  # a config (tests), or the full checks ran: nothing remembered
        found = _backward_launches(layer, m, n, x.element_size(), device, block, rows, programs, num_warps)
    else:
        key = (layer, m, n, x.dtype, device)
        found = _BACKWARD.get(key)
        if found is None:
            found = _backward_launches(layer, m, n, x.element_size(), device, None, None, None, None)
            if len(_BACKWARD) >= BACKWARD_PLANS:
                _BACKWARD.clear()
            _BACKWARD[key] = found
    main, count, per_program, finish, sum_grid = found
    head = (x, w, dy, mean, rstd, dx)
    tail = (m, n, per_program, x.stride(0), dy.stride(0), dx.stride(0))
    vectors = (dw is not None) + (db is not None)
    if finish is None or not vectors:
        # One program sums every row (its sums are the gradients), or no weight or bias gradient
        # is wanted (both None: the programs write dx alone): no partial buffer.
        main((count,), *head, dw, db, *tail)
        return out
    partials = torch.empty((vectors, count, n), dtype=torch.float32, device=x.device)
    pw = None if dw is None else partials[0]
    pb = None if db is None else partials[-1]
    main((count,), *head, pw, pb, *tail)
    finish(sum_grid, pw, pb, dw, db, count, n)
    return out


# The backward's launches of the launcher's own choice per (op, rows, row width, dtype, device),
# for calls that pass the fast checks: working them out
# costs about 9 us of Python on the CPU machine, and autograd runs a backward on its device
# thread, where Python runs slower still and the caller waits for it.
_BACKWARD: dict[tuple[Any, ...], tuple[Launcher, int, int, Launcher | None, tuple[int]]] = {}
BACKWARD_PLANS = 1024  # remembered before the dict starts over


def _backward_launches(layer: bool, m: int, n: int, itemsize: int, device: int, block: int | None, rows: int | None,
                       programs: int | None, num_warps: int | None) -> tuple[Launcher, int, int, Launcher | None, tuple[int]]:
    """(main launcher, programs, rows per program, the partial sums' launcher or None where one
    program sums every row, its grid) for the backward over ``m`` rows of ``n``."""
    plan = plans.backward_plan(n, itemsize, block, rows, num_warps)
    sms = None if device < 0 else _sm_count(device)
    count, per_program = plans.row_programs(m, plan, sms, programs)
    if plan.looped:
        main = _launcher(kernels.norm_bwd_looped, plan.num_warps, LAYER=layer, BLOCK_N=plan.block_n)
    else:
        main = _launcher(kernels.norm_bwd_fused, plan.num_warps, LAYER=layer, ROWS=plan.rows, BLOCK_N=plan.block_n,
                         NUM_STAGES=plan.stages)
    if count == 1 and not plan.looped:
        return main, count, per_program, None, (1,)
    block_p, block_c = plans.sum_plan(n, sms)
    finish = _launcher(kernels.sum_partials, plans.SUM_WARPS, BLOCK_P=block_p, BLOCK_C=block_c)
    return main, count, per_program, finish, (-(-n // block_c),)


def rms_norm_backward(x: Any, weight: Any, y: Any, rstd: Any, grad_y: Any, *, out: Any, eps: float,
                      BLOCK: int | None = None, ROWS: int | None = None, programs: int | None = None,
                      num_warps: int | None = None) -> Any:
    """out = (grad_x, grad_weight) from x, the weight, the forward's rstd and grad_y (y and eps are
    not needed: rstd carries eps). Without a weight (None) grad_weight is None too. Config
    (tests): BLOCK, ROWS (rows per step), programs (row ranges, i.e. partial sums), num_warps."""
    return _backward(False, x, weight, None, None, rstd, grad_y, out, BLOCK, ROWS, programs, num_warps)


def layer_norm_backward(x: Any, weight: Any, bias: Any, y: Any, mean: Any, rstd: Any, grad_y: Any, *, out: Any,
                        eps: float, BLOCK: int | None = None, ROWS: int | None = None, programs: int | None = None,
                        num_warps: int | None = None) -> Any:
    """out = (grad_x, grad_weight, grad_bias) from x, the weight, the forward's mean and rstd and
    grad_y; the gradient of an absent (None) weight or bias is None."""
    return _backward(True, x, weight, bias, mean, rstd, grad_y, out, BLOCK, ROWS, programs, num_warps)


# -- ahead-of-time compile specs (compile items) ----------------------------------------------------

AOT_N = 4096  # compile items build the plan of this row width unless the config names another ("N")
AOT_SMS = 132  # and of an H100 SXM's SM count, where the plan depends on it


def _aot_plan(dtype: str, config: dict[str, Any], backward: bool) -> plans.Plan:
    n = int(config.get("N", AOT_N))
    itemsize = 4 if dtype == "float32" else 2
    choose = plans.backward_plan if backward else plans.forward_plan
    return choose(n, itemsize, config.get("BLOCK"), config.get("ROWS"), config.get("num_warps"))


def _aligned(signature: dict[str, str]) -> tuple[str, ...]:
    # What the JIT makes of torch tensors and of the compile widths' sizes and strides: 16-byte
    # aligned pointers, integers divisible by 16.
    return tuple(k for k, v in signature.items() if v.startswith("*") or v == "i32")


def _present(layer: bool, config: dict[str, Any]) -> tuple[bool, bool]:
    """(weight, bias) in a compile: both, unless the config leaves one out ("weight": False,
    "bias": False: tests compile those specializations; the compile items compile the plain
    one). rms_norm has no bias: its launchers pass None for the bias gradient, so do its specs."""
    return bool(config.get("weight", True)), layer and bool(config.get("bias", True))


def _specialize(signature: dict[str, str], constexprs: dict[str, Any], vectors: dict[tuple[str, ...], bool]) -> None:
    """The parameters of each absent vector (weight or bias, with its gradient or partial sums:
    ``vectors`` maps them to whether it is present) become constexpr None, as triton specializes
    the None the launchers pass."""
    for names, present in vectors.items():
        if not present:
            signature |= dict.fromkeys(names, "constexpr")
            constexprs |= dict.fromkeys(names)


def _aot_forward(layer: bool, dtype: str, config: dict[str, Any]) -> AotSpec:
    plan = _aot_plan(dtype, config, backward=False)
    ptr, stat = f"*{TRITON_TYPE[dtype]}", "*fp32"
    signature = {"X": ptr, "W": ptr} | ({"B": ptr, "Y": ptr, "MEAN": stat} if layer else {"Y": ptr}) | {"RSTD": stat}
    if plan.looped:
        fn = kernels.ln_fwd_looped if layer else kernels.rms_fwd_looped
        constexprs: dict[str, Any] = {"BLOCK_N": plan.block_n}
    else:
        fn = kernels.ln_fwd_fused if layer else kernels.rms_fwd_fused
        signature["M"] = "i32"
        constexprs = {"ROWS": plan.rows, "BLOCK_N": plan.block_n}
    signature |= {"N": "i32", "stride_xm": "i32", "stride_ym": "i32", "eps": "fp32"}
    signature |= dict.fromkeys(constexprs, "constexpr")
    weight, bias = _present(layer, config)
    _specialize(signature, constexprs, {("W",): weight} | ({("B",): bias} if layer else {}))
    return AotSpec(fn=fn, signature=signature, constexprs=constexprs, options={"num_warps": plan.num_warps},
                   aligned=_aligned(signature))


def _aot_backward(layer: bool, dtype: str, config: dict[str, Any]) -> AotSpec:
    ptr, f32 = f"*{TRITON_TYPE[dtype]}", "*fp32"
    if config.get("stage") == "sum":
        signature = {"PW": f32, "PB": f32, "DW": ptr, "DB": ptr, "P": "i32", "N": "i32"}
        block_p, block_c = plans.sum_plan(int(config.get("N", AOT_N)), AOT_SMS)
        constexprs: dict[str, Any] = {"BLOCK_P": block_p, "BLOCK_C": block_c}
        signature |= dict.fromkeys(constexprs, "constexpr")
        weight, bias = _present(layer, config)
        _specialize(signature, constexprs, {("PW", "DW"): weight, ("PB", "DB"): bias})
        return AotSpec(fn=kernels.sum_partials, signature=signature, constexprs=constexprs,
                       options={"num_warps": plans.SUM_WARPS}, aligned=_aligned(signature))
    plan = _aot_plan(dtype, config, backward=True)
    # The partial-sum path (more than one program): fp32 partial rows.
    partials = ("PW", "PB") if plan.looped else ("DW", "DB")
    signature = {"X": ptr, "W": ptr, "DY": ptr, "MEAN": f32, "RSTD": f32, "DX": ptr, partials[0]: f32, partials[1]: f32,
                 "M": "i32", "N": "i32", "rows_per_program": "i32", "stride_xm": "i32", "stride_dym": "i32",
                 "stride_dxm": "i32"}
    if plan.looped:
        fn = kernels.norm_bwd_looped
        constexprs = {"LAYER": layer, "BLOCK_N": plan.block_n}
    else:
        fn = kernels.norm_bwd_fused
        constexprs = {"LAYER": layer, "ROWS": plan.rows, "BLOCK_N": plan.block_n, "NUM_STAGES": plan.stages}
    signature |= dict.fromkeys(constexprs, "constexpr")
    weight, bias = _present(layer, config)
    _specialize(signature, constexprs, {("W", partials[0]): weight, (partials[1],): bias})
    return AotSpec(fn=fn, signature=signature, constexprs=constexprs, options={"num_warps": plan.num_warps},
                   aligned=_aligned(signature))


def aot_rms_norm_forward(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _aot_forward(False, dtype, config)


def aot_layer_norm_forward(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _aot_forward(True, dtype, config)


def aot_rms_norm_backward(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _aot_backward(False, dtype, config)


def aot_layer_norm_backward(arch: Any, dtype: str, config: dict[str, Any]) -> AotSpec:
    return _aot_backward(True, dtype, config)
