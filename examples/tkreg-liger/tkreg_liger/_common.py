"""Shared helpers of the launchers: input checks, output buffers, and what makes liger's kernels
run under Triton's CPU interpreter (TRITON_INTERPRET=1).

Under the interpreter (triton 3.6) two things in liger's kernels fail that compiled Triton accepts:

- a Python float argument stays a Python float, so liger's `eps.to(tl.float32)` (rms_norm,
  layer_norm, swiglu's gate_multiplier) raises AttributeError. `f32()` passes such scalars as
  fp32 interpreter tensors, which is what the compiled kernel receives (an fp32 scalar).
- libdevice's rsqrt (rms_norm, layer_norm) is an extern function, which the interpreter does not
  support. `patch_rsqrt()` points the module global `rsqrt` of liger's two norm modules at a
  Triton function computing 1 / sqrt(x). It does so only while the interpreter is on, so
  compiled kernels (GPU runs and compile items) use liger's code untouched.

A third problem cannot be worked around: arithmetic between two bf16 values gives garbage under
the interpreter (numpy has no bf16). Launchers whose liger kernel does bf16 * bf16 refuse bf16
inputs while the interpreter is on (`INTERP_BF16`), with that reason.
"""

import numpy as np
import torch
import triton
import triton.language as tl

from tkreg.launch.inputs import check_output, device_reasons, fail_if, interpreter_active, tensor_reasons

FLOATS = ("float32", "float16", "bfloat16")
MAX_COLS = 65536  # liger_kernel.ops.utils.calculate_settings raises above this
INTERP_BF16 = ("bf16 arithmetic is wrong under Triton 3.6's CPU interpreter (bf16 * bf16 in this "
               "liger kernel); bf16 runs on a GPU only")


@triton.jit
def _rsqrt(x):
    return 1.0 / tl.sqrt(x)


def f32(value):
    """A float scalar argument as liger's kernels expect it (see the module docstring)."""
    if interpreter_active():
        from triton.runtime.interpreter import TensorHandle

        return tl.tensor(TensorHandle(np.array([value], dtype=np.float32), tl.float32), tl.float32)
    return float(value)


def patch_rsqrt(*modules):
    if interpreter_active():
        for module in modules:
            module.rsqrt = _rsqrt


def row_reasons(t, name, n=None, dtypes=FLOATS):
    """A 2-D tensor with unit column stride (rows may be strided), optionally n columns."""
    found = tensor_reasons(t, name, rank=2, dtypes_allowed=dtypes)
    if found:
        return found
    if t.shape[1] > 1 and t.stride(1) != 1:
        found.append(f"{name} needs unit column stride (got strides {tuple(t.stride())})")
    if n is not None and t.shape[1] != n:
        found.append(f"{name} has {t.shape[1]} columns, expected {n}")
    return found


def vector_reasons(t, name, n, dtypes=FLOATS):
    """A 1-D tensor of n elements with unit stride (liger indexes it as ptr + col)."""
    found = tensor_reasons(t, name, rank=1, dtypes_allowed=dtypes)
    if found:
        return found
    if t.shape[0] != n:
        found.append(f"{name} has {t.shape[0]} elements, expected {n}")
    elif n > 1 and t.stride(0) != 1:
        found.append(f"{name} needs unit stride (got {t.stride(0)})")
    return found


def devices(**named):
    return device_reasons(list(named.items()), interpretable=True)


def outputs(out, specs, device):
    """The launcher's out as a tuple: allocated (contiguous) when None, else checked.

    specs: one (shape, torch dtype) per output. Every output must have unit stride in its last
    dim, as liger's kernels index them (ptr + row * row_stride + col)."""
    if out is None:
        return tuple(torch.empty(shape, dtype=dtype, device=device) for shape, dtype in specs)
    got = (out,) if isinstance(out, torch.Tensor) else tuple(out)
    if len(got) != len(specs):
        raise ValueError(f"out has {len(got)} tensors, expected {len(specs)}")
    for t, (shape, dtype) in zip(got, specs, strict=False):
        check_output(t, tuple(shape), dtype, device)
        if t.dim() and t.shape[-1] > 1 and t.stride(-1) != 1:
            fail_if([f"an output needs unit stride in its last dim (got strides {tuple(t.stride())})"])
    return got


def sm_count(device):
    """What liger sizes its persistent backward grids by (1 off a GPU, as liger does)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1


def ordered_signature(fn, types):
    """types ({arg: type}) in the order of fn's parameters, every parameter named exactly once."""
    names = list(fn.arg_names)
    missing = [n for n in names if n not in types]
    extra = [n for n in types if n not in names]
    if missing or extra:
        raise ValueError(f"signature of {fn.fn.__name__}: missing {missing}, unknown {extra}")
    return {n: types[n] for n in names}
