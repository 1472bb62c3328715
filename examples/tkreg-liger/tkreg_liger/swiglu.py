"""The `swiglu` op (c = silu(a) * b) and liger-kernel 0.8.5's SwiGLU kernels.

The launchers launch liger's @triton.jit kernels with liger's settings (calculate_settings, and
the column-tiled kernels where liger's _should_tile picks them: Blackwell, rows >= 16384 wide),
as liger's swiglu_forward / swiglu_backward do, except:
- the forward writes into tkreg's `out` (liger allocates c itself);
- liger's backward kernel overwrites a with da and b with db. tkreg's backward contract leaves
  every input unchanged and writes the gradients into the tensors it gives, so the launcher
  copies a and b into those gradient tensors first and runs liger's kernel on them. That costs
  two copies (4 * M * N elements of traffic) that liger's in-place autograd function does not pay.
liger's kernels use one row stride for a, b and c (resp. dc, da, db): the forward takes only
contiguous a and b; the backward takes a and b of any layout (they are copied) and a contiguous dc.
"""

import torch
import torch.nn.functional as F
import triton
from liger_kernel.ops import swiglu as liger
from liger_kernel.ops.utils import calculate_settings, device_context

from tkreg import Cost
from tkreg.launch.aot import AotSpec
from tkreg.launch.inputs import fail_if, interpreter_active
from tkreg.launch.tma import TRITON_TYPE

from ._common import INTERP_BF16, MAX_COLS, devices, f32, ordered_signature, outputs, row_reasons


def _pair_reasons(a, b):
    found = row_reasons(a, "a") + row_reasons(b, "b")
    if found:
        return found
    if a.shape != b.shape or a.dtype != b.dtype:
        found.append(f"a and b differ: {tuple(a.shape)} {a.dtype} and {tuple(b.shape)} {b.dtype}")
    elif a.shape[1] > MAX_COLS:
        found.append(f"liger's swiglu takes rows of at most {MAX_COLS} elements; these have {a.shape[1]}")
    return found


def forward_reasons(a, b):
    found = _pair_reasons(a, b)
    if not found:
        if not (a.is_contiguous() and b.is_contiguous()):
            found.append("liger's swiglu forward uses one row stride for a, b and c: a and b must be contiguous")
        if interpreter_active() and a.dtype == torch.bfloat16:
            found.append(INTERP_BF16)
    return found + devices(a=a, b=b)


def backward_reasons(a, b, c, grad_c):
    found = _pair_reasons(a, b)
    if not found:
        found += row_reasons(grad_c, "grad_c")
        if not found and grad_c.shape != a.shape:
            found.append(f"grad_c has shape {tuple(grad_c.shape)}, a {tuple(a.shape)}")
        if not found and not grad_c.is_contiguous():
            found.append("liger's swiglu backward uses one row stride for dc, da and db: grad_c must be contiguous")
    return found + devices(a=a, b=b, grad_c=grad_c)


def _launch(kernels, m, n, device, *args):
    """Pick liger's kernel and settings for rows of n, as swiglu_forward/backward do."""
    plain, tiled = kernels
    with device_context(device):
        if liger._should_tile(n):
            block_size, num_warps = liger._swiglu_tile_settings(n)
            tiled[(m, triton.cdiv(n, block_size))](*args, f32(1.0), n, BLOCK_SIZE=block_size, num_warps=num_warps)
        else:
            block_size, num_warps = calculate_settings(n)
            plain[(m,)](*args, f32(1.0), n_cols=n, BLOCK_SIZE=block_size, num_warps=num_warps)


def swiglu_forward(a, b, *, out=None):
    fail_if(forward_reasons(a, b))
    m, n = a.shape
    (c,) = outputs(out, [((m, n), a.dtype)], a.device)
    dest = c if c.is_contiguous() else torch.empty_like(a)  # liger uses c's row stride for a and b
    _launch((liger._swiglu_forward_kernel, liger._swiglu_forward_kernel_tiled), m, n, a.device,
            a, b, dest, dest.stride(0))
    if dest is not c:
        c.copy_(dest)
    return c


def swiglu_backward(a, b, c, grad_c, *, out=None):
    fail_if(backward_reasons(a, b, c, grad_c))
    m, n = a.shape
    grad_a, grad_b = outputs(out, [((m, n), a.dtype), ((m, n), b.dtype)], a.device)
    # liger writes da over a and db over b: give it copies, laid out like grad_c
    da = grad_a if grad_a.is_contiguous() else torch.empty_like(grad_c, dtype=a.dtype)
    db = grad_b if grad_b.is_contiguous() else torch.empty_like(grad_c, dtype=b.dtype)
    da.copy_(a)
    db.copy_(b)
    _launch((liger._swiglu_backward_kernel, liger._swiglu_backward_kernel_tiled), m, n, a.device,
            grad_c, da, db, grad_c.stride(0))
    if da is not grad_a:
        grad_a.copy_(da)
    if db is not grad_b:
        grad_b.copy_(db)
    return grad_a, grad_b


# ---------------------------------------------------------------------------------------------
# the op


def reference(a, b):
    return F.silu(a) * b


def make_inputs(case, dtype, generator, device):
    m, n = case["M"], case["N"]
    width = n + 8 if case.variant == "padded" else n  # padded: rows strided inside a wider buffer
    a = torch.randn(m, width, generator=generator, device=device).to(dtype)[:, :n]
    b = torch.randn(m, width, generator=generator, device=device).to(dtype)[:, :n]
    return a, b


def make_output(a, b):
    return torch.empty(a.shape, dtype=a.dtype, device=a.device)


def cost(dims, itemsize):
    n = dims["M"] * dims["N"]
    return Cost(bytes=3 * n * itemsize, flops=5 * n)  # read a, b; write c. exp, add, divide, 2 products


def backward_cost(dims, itemsize):
    n = dims["M"] * dims["N"]
    return Cost(bytes=5 * n * itemsize, flops=12 * n)  # read dc, a, b; write da, db


def peer(a, b, *, out=None):
    if out is None:
        return F.silu(a) * b
    return torch.mul(F.silu(a), b, out=out)


# ---------------------------------------------------------------------------------------------
# ahead-of-time compile specs: a 14336-wide row (Llama-3 8B's MLP), liger's settings for it

AOT_COLS = 14336


def _aot(fn, names, dtype):
    ptr = f"*{TRITON_TYPE[dtype]}"
    block_size, num_warps = calculate_settings(AOT_COLS)
    sig = {names[0]: ptr, names[1]: ptr, names[2]: ptr, "stride": "i32", "gate_multiplier": "fp32",
           "n_cols": "constexpr", "BLOCK_SIZE": "constexpr"}
    return AotSpec(fn=fn, signature=ordered_signature(fn, sig),
                   constexprs={"n_cols": AOT_COLS, "BLOCK_SIZE": block_size}, options={"num_warps": num_warps},
                   aligned=(*names, "stride"))


def forward_aot(arch, dtype, config):
    return _aot(liger._swiglu_forward_kernel, ("a_ptr", "b_ptr", "c_ptr"), dtype)


def backward_aot(arch, dtype, config):
    return _aot(liger._swiglu_backward_kernel, ("dc_ptr", "a_ptr", "b_ptr"), dtype)
