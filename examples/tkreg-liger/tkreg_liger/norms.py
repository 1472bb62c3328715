"""liger-kernel 0.8.5's RMSNorm and LayerNorm kernels, for the `norms` plugin's ops.

The ops' contracts (from `tkreg info` and the ops' torch schemas):
  rms_norm(x (M, N), weight (N,), *, eps) -> y (M, N) in x's dtype, rstd (M,) fp32;
      gradients for x and weight.
  layer_norm(x, weight, bias, *, eps) -> y, mean (M,) fp32, rstd (M,) fp32;
      gradients for x, weight and bias.

The launchers launch liger's own @triton.jit kernels with liger's own settings
(calculate_settings, the SM-count grid of the backward, the choice between the one-row and the
16-row kernel), as liger's rms_norm_forward / rms_norm_backward / layer_norm_forward /
layer_norm_backward do, with two differences that tkreg's launcher contract needs:
- they write into the `out` tensors tkreg gives (liger's Python functions allocate their own,
  which would cost a copy per call), and take any row stride of x and grad_y as liger's kernels
  do (liger's functions only take contiguous tensors);
- rms_norm runs in liger's casting_mode "gemma" with offset 0: everything in fp32, rounded once
  at the end. liger's default "llama" mode rounds x * rstd to x's dtype before multiplying by
  the weight: two roundings in fp16/bf16, up to ~3 units of the dtype from the reference, where
  the op's tolerance allows 2 (bf16 rtol 2^-7, fp16 2^-10). In fp32 the two modes are the same.
"""

import math

import torch
import triton
from liger_kernel.ops import layer_norm as liger_ln
from liger_kernel.ops import rms_norm as liger_rms
from liger_kernel.ops.utils import calculate_settings, device_context, torch_to_triton_dtype

from tkreg.launch.aot import AotSpec
from tkreg.launch.inputs import fail_if
from tkreg.launch.tma import TRITON_TYPE

from ._common import MAX_COLS, devices, f32, ordered_signature, outputs, patch_rsqrt, row_reasons, sm_count, vector_reasons

patch_rsqrt(liger_rms, liger_ln)  # only under TRITON_INTERPRET=1: see _common

GEMMA = liger_rms._CASTING_MODE_GEMMA.value
BLOCK_ROW = 16  # liger's rows per program in its _block_ kernels
PATHS = ("auto", "row", "block")


def _path_reasons(n, path):
    if path not in PATHS:
        return [f"path must be one of {PATHS}, got {path!r}"]
    if path == "block" and triton.next_power_of_2(n) > 256:
        return [f"path=block takes rows of at most 256 elements (liger uses its 16-row kernel only "
                f"for those); this row has {n}"]
    return []


def _use_block(m, block_size, path):
    """liger's rms_norm choice: the 16-row kernel for short rows and many of them."""
    if path == "auto":
        return not (block_size > 256 or m < 4096 * 8)
    return path == "block"


def _norm_reasons(x, params, grad_y=None, stats=()):
    found = row_reasons(x, "x")
    if found:
        return found + devices(x=x, **dict(params), **dict(stats))
    n = x.shape[1]
    if n > MAX_COLS:
        found.append(f"liger's norm kernels take rows of at most {MAX_COLS} elements; this row has {n}")
    for name, t in params:
        found += vector_reasons(t, name, n)
    for name, t in stats:
        found += vector_reasons(t, name, x.shape[0], dtypes=("float32",))
    named = dict(x=x, **dict(params), **dict(stats))
    if grad_y is not None:
        found += row_reasons(grad_y, "grad_y")
        if not found and grad_y.shape != x.shape:
            found.append(f"grad_y has shape {tuple(grad_y.shape)}, x {tuple(x.shape)}")
        named["grad_y"] = grad_y
    return found + devices(**named)


# ---------------------------------------------------------------------------------------------
# rms_norm


def rms_norm_forward_reasons(x, weight, config=None):
    found = _norm_reasons(x, [("weight", weight)])
    if not found:
        found += _path_reasons(x.shape[1], (config or {}).get("path", "auto"))
    return found


def rms_norm_backward_reasons(x, weight, y, rstd, grad_y, config=None):
    found = _norm_reasons(x, [("weight", weight)], grad_y=grad_y, stats=[("rstd", rstd)])
    if not found:
        found += _path_reasons(x.shape[1], (config or {}).get("path", "auto"))
    return found


def rms_norm_forward(x, weight, *, out=None, eps=1e-6, path="auto"):
    fail_if(rms_norm_forward_reasons(x, weight, {"path": path}))
    m, n = x.shape
    y, rstd = outputs(out, [((m, n), x.dtype), ((m,), torch.float32)], x.device)
    block_size, num_warps = calculate_settings(n)
    common = dict(casting_mode=GEMMA, elementwise_affine=True, BLOCK_SIZE=block_size, num_warps=num_warps)
    with device_context(x.device):
        if _use_block(m, block_size, path):
            liger_rms._block_rms_norm_forward_kernel[(triton.cdiv(m, BLOCK_ROW),)](
                y, y.stride(0), x, x.stride(0), weight, weight.stride(0), rstd, rstd.stride(0),
                m, n, f32(eps), f32(0.0), BLOCK_ROW=BLOCK_ROW, **common)
        else:
            liger_rms._rms_norm_forward_kernel[(m,)](
                y, y.stride(0), x, x.stride(0), weight, weight.stride(0), rstd, rstd.stride(0),
                n, f32(eps), f32(0.0), **common)
    return y, rstd


def rms_norm_backward(x, weight, y, rstd, grad_y, *, out=None, eps=1e-6, path="auto"):
    fail_if(rms_norm_backward_reasons(x, weight, y, rstd, grad_y, {"path": path}))
    m, n = x.shape
    grad_x, grad_w = outputs(out, [((m, n), x.dtype), ((n,), weight.dtype)], x.device)
    block_size, num_warps = calculate_settings(n)
    programs = sm_count(x.device)
    partial_dw = torch.empty((programs, n), dtype=torch.float32, device=x.device)  # fp32, as liger
    args = (grad_y, grad_y.stride(0), grad_x, grad_x.stride(0), x, x.stride(0),
            torch_to_triton_dtype[x.dtype], weight, weight.stride(0), rstd, rstd.stride(0),
            partial_dw, partial_dw.stride(0), m, n, f32(0.0))
    common = dict(casting_mode=GEMMA, elementwise_affine=True, BLOCK_SIZE=block_size,
                  COMPUTE_DW=True, num_warps=num_warps)
    with device_context(x.device):
        if _use_block(m, block_size, path):
            liger_rms._block_rms_norm_backward_kernel[(programs,)](*args, BLOCK_ROW=BLOCK_ROW, **common)
        else:
            liger_rms._rms_norm_backward_kernel[(programs,)](*args, math.ceil(m / programs), **common)
    grad_w.copy_(partial_dw.sum(dim=0))
    return grad_x, grad_w


# ---------------------------------------------------------------------------------------------
# layer_norm


def layer_norm_forward_reasons(x, weight, bias):
    return _norm_reasons(x, [("weight", weight), ("bias", bias)])


def layer_norm_backward_reasons(x, weight, bias, y, mean, rstd, grad_y):
    return _norm_reasons(x, [("weight", weight), ("bias", bias)], grad_y=grad_y,
                         stats=[("mean", mean), ("rstd", rstd)])


def layer_norm_forward(x, weight, bias, *, out=None, eps=1e-5):
    fail_if(layer_norm_forward_reasons(x, weight, bias))
    m, n = x.shape
    y, mean, rstd = outputs(out, [((m, n), x.dtype), ((m,), torch.float32), ((m,), torch.float32)],
                            x.device)
    block_size, num_warps = calculate_settings(n)
    with device_context(x.device):
        liger_ln._layer_norm_forward_kernel[(m,)](
            y, y.stride(0), x, x.stride(0), weight, weight.stride(0), bias, bias.stride(0),
            mean, mean.stride(0), rstd, rstd.stride(0), n, f32(eps),
            BLOCK_SIZE=block_size, num_warps=num_warps)
    return y, mean, rstd


def layer_norm_backward(x, weight, bias, y, mean, rstd, grad_y, *, out=None, eps=1e-5):
    fail_if(layer_norm_backward_reasons(x, weight, bias, y, mean, rstd, grad_y))
    m, n = x.shape
    grad_x, grad_w, grad_b = outputs(
        out, [((m, n), x.dtype), ((n,), weight.dtype), ((n,), bias.dtype)], x.device)
    block_size, num_warps = calculate_settings(n)
    programs = sm_count(x.device)
    partial_dw = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    partial_db = torch.empty((programs, n), dtype=torch.float32, device=x.device)
    with device_context(x.device):
        liger_ln._layer_norm_backward_kernel[(programs,)](
            x, x.stride(0), weight, mean, mean.stride(0), rstd, rstd.stride(0),
            grad_x, grad_x.stride(0), partial_dw, partial_dw.stride(0), partial_db, partial_db.stride(0),
            grad_y, grad_y.stride(0), m, n,
            rows_per_program=math.ceil(m / programs), BLOCK_SIZE=block_size,
            COMPUTE_DW=True, COMPUTE_DB=True, num_warps=num_warps)
    grad_w.copy_(partial_dw.sum(dim=0))
    grad_b.copy_(partial_db.sum(dim=0))
    return grad_x, grad_w, grad_b


# ---------------------------------------------------------------------------------------------
# ahead-of-time compile specs: a 4096-wide row (Llama-7B's hidden size), liger's settings for it

AOT_COLS = 4096
AOT_SHORT_COLS = 128  # path=block: a 128-wide row (a qk-norm head)


def _aot_cols(config):
    return AOT_SHORT_COLS if config.get("path") == "block" else AOT_COLS


def rms_norm_forward_aot(arch, dtype, config):
    ptr = f"*{TRITON_TYPE[dtype]}"
    block_size, num_warps = calculate_settings(_aot_cols(config))
    sig = {"Y_ptr": ptr, "Y_row_stride": "i32", "X_ptr": ptr, "X_row_stride": "i32",
           "W_ptr": ptr, "W_row_stride": "i32", "RSTD_ptr": "*fp32", "RSTD_row_stride": "i32"}
    constexprs = {"casting_mode": GEMMA, "elementwise_affine": True, "BLOCK_SIZE": block_size}
    if config.get("path") == "block":
        fn = liger_rms._block_rms_norm_forward_kernel
        sig["n_rows"] = "i32"
        constexprs["BLOCK_ROW"] = BLOCK_ROW
    else:
        fn = liger_rms._rms_norm_forward_kernel
    sig.update({"n_cols": "i32", "eps": "fp32", "offset": "fp32"})
    sig.update({k: "constexpr" for k in constexprs})
    return AotSpec(fn=fn, signature=ordered_signature(fn, sig), constexprs=constexprs, options={"num_warps": num_warps},
                   aligned=("Y_ptr", "Y_row_stride", "X_ptr", "X_row_stride", "W_ptr", "RSTD_ptr", "n_cols"))


def rms_norm_backward_aot(arch, dtype, config):
    ptr = f"*{TRITON_TYPE[dtype]}"
    block_size, num_warps = calculate_settings(_aot_cols(config))
    sig = {"dY_ptr": ptr, "dY_row_stride": "i32", "dX_ptr": ptr, "dX_row_stride": "i32",
           "X_ptr": ptr, "X_row_stride": "i32", "X_dtype": "constexpr", "W_ptr": ptr,
           "W_row_stride": "i32", "RSTD_ptr": "*fp32", "RSTD_row_stride": "i32",
           "dW_ptr": "*fp32", "dW_row_stride": "i32", "n_rows": "i32", "n_cols": "i32", "offset": "fp32"}
    constexprs = {"X_dtype": torch_to_triton_dtype[getattr(torch, dtype)], "casting_mode": GEMMA,
                  "elementwise_affine": True, "BLOCK_SIZE": block_size, "COMPUTE_DW": True}
    if config.get("path") == "block":
        fn = liger_rms._block_rms_norm_backward_kernel
        constexprs["BLOCK_ROW"] = BLOCK_ROW
    else:
        fn = liger_rms._rms_norm_backward_kernel
        sig["rows_per_program"] = "i32"
    sig.update({k: "constexpr" for k in constexprs})
    return AotSpec(fn=fn, signature=ordered_signature(fn, sig), constexprs=constexprs, options={"num_warps": num_warps},
                   aligned=("dY_ptr", "dY_row_stride", "dX_ptr", "dX_row_stride", "X_ptr", "X_row_stride",
                            "W_ptr", "RSTD_ptr", "dW_ptr", "dW_row_stride", "n_cols"))


def layer_norm_forward_aot(arch, dtype, config):
    ptr = f"*{TRITON_TYPE[dtype]}"
    block_size, num_warps = calculate_settings(AOT_COLS)
    sig = {"Y_ptr": ptr, "Y_row_stride": "i32", "X_ptr": ptr, "X_row_stride": "i32",
           "W_ptr": ptr, "W_row_stride": "i32", "B_ptr": ptr, "B_row_stride": "i32",
           "Mean_ptr": "*fp32", "Mean_row_stride": "i32", "RSTD_ptr": "*fp32", "RSTD_row_stride": "i32",
           "n_cols": "i32", "eps": "fp32", "BLOCK_SIZE": "constexpr"}
    return AotSpec(fn=liger_ln._layer_norm_forward_kernel,
                   signature=ordered_signature(liger_ln._layer_norm_forward_kernel, sig),
                   constexprs={"BLOCK_SIZE": block_size}, options={"num_warps": num_warps},
                   aligned=("Y_ptr", "Y_row_stride", "X_ptr", "X_row_stride", "W_ptr", "B_ptr",
                            "Mean_ptr", "RSTD_ptr", "n_cols"))


def layer_norm_backward_aot(arch, dtype, config):
    ptr = f"*{TRITON_TYPE[dtype]}"
    block_size, num_warps = calculate_settings(AOT_COLS)
    sig = {"X_ptr": ptr, "stride_x": "i32", "W_ptr": ptr, "Mean_ptr": "*fp32", "stride_mean": "i32",
           "RSTD_ptr": "*fp32", "stride_rstd": "i32", "DX_ptr": ptr, "stride_dx": "i32",
           "DW_ptr": "*fp32", "stride_dw": "i32", "DB_ptr": "*fp32", "stride_db": "i32",
           "DY_ptr": ptr, "stride_dy": "i32", "n_rows": "i32", "n_cols": "i32",
           "rows_per_program": "constexpr", "BLOCK_SIZE": "constexpr",
           "COMPUTE_DW": "constexpr", "COMPUTE_DB": "constexpr"}
    # 4096 rows over an H100's 132 SMs
    constexprs = {"rows_per_program": math.ceil(4096 / 132), "BLOCK_SIZE": block_size,
                  "COMPUTE_DW": True, "COMPUTE_DB": True}
    return AotSpec(fn=liger_ln._layer_norm_backward_kernel,
                   signature=ordered_signature(liger_ln._layer_norm_backward_kernel, sig), constexprs=constexprs,
                   options={"num_warps": num_warps},
                   aligned=("X_ptr", "stride_x", "W_ptr", "Mean_ptr", "RSTD_ptr", "DX_ptr", "stride_dx",
                            "DW_ptr", "stride_dw", "DB_ptr", "stride_db", "DY_ptr", "stride_dy", "n_cols"))
