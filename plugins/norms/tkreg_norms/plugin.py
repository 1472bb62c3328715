"""Registers rms_norm and layer_norm and their Triton kernels (forward and backward). Imports
neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import tkreg
from tkreg import CompileTarget, Kernel, Op, Output, Param, Requirements, case

from . import tolerances as tol

PKG = "tkreg_norms"
DTYPES = tol.DTYPES
GPU = ("gpu", "full")  # checked on a GPU (and by --tkreg-full): too slow for the interpreter
BENCH = ("bench",)
LLM = ("bfloat16",)  # the dtype models run the LLM-row cases in

CASES = (
    # Odd shapes, under the interpreter too: a single element, rows narrower than a warp, a row
    # width that is no power of two (fused in one program with others), the LLM width at a few
    # rows, the widest fused forward row (16384 columns; the backward loops from 8193), rows
    # longer than any fused plan (looped), strided rows (16-byte aligned and not).
    case(M=1, N=1),
    case(M=3, N=7),
    case(M=5, N=1000),
    case(M=3, N=4096),
    case(M=2, N=8193),
    case(M=2, N=65537),
    case(M=33, N=100, variant="padded"),
    case(M=9, N=300, variant="offset"),
    # On a GPU: many rows (hundreds of backward programs and their partial sums; tolerances.py
    # assumes at most MAX_ROWS rows), the widest fused rows and the narrowest looped ones, very
    # long rows, odd strides at LLM widths.
    case(M=4099, N=1000, sets=GPU),
    case(M=4099, N=7, sets=GPU),
    case(M=1000, N=8192, sets=GPU),
    case(M=1024, N=16384, sets=GPU, variant="padded"),
    case(M=257, N=16385, sets=GPU),
    case(M=16, N=200003, sets=GPU),
    case(M=2048, N=5120, sets=GPU, variant="offset"),
    # Benchmarks: square and large in every dtype; LLM model widths (4096, 5120, 8192) at 4096 and
    # 16384 rows and the decode row (one token) in bf16, as models run them.
    case(M=4096, N=4096, sets=BENCH),
    case(M=16384, N=8192, sets=BENCH),
    case(M=4096, N=5120, sets=BENCH, dtypes=LLM),
    case(M=4096, N=8192, sets=BENCH, dtypes=LLM),
    case(M=16384, N=4096, sets=BENCH, dtypes=LLM),
    case(M=16384, N=5120, sets=BENCH, dtypes=LLM),
    case(M=1, N=4096, sets=BENCH, dtypes=LLM),
)

# Absent inputs (op.NO_WEIGHT, NO_BIAS, NO_AFFINE: None, as nn.RMSNorm(d, elementwise_affine=False),
# nn.LayerNorm(d, bias=False) and nn.LayerNorm(d, elementwise_affine=False) pass them): a width
# no power of two, one row past the fused backward (looped), rows over several program steps;
# on a GPU many rows and the narrowest looped forward rows.
RMS_CASES = (
    *CASES,
    case(M=3, N=7, variant="no_weight"),
    case(M=2, N=8193, variant="no_weight"),
    case(M=33, N=100, variant="no_weight"),
    case(M=4099, N=1000, sets=GPU, variant="no_weight"),
    case(M=257, N=16385, sets=GPU, variant="no_weight"),
)
LAYER_CASES = (
    *CASES,
    case(M=3, N=7, variant="no_bias"),
    case(M=5, N=1000, variant="no_affine"),
    case(M=2, N=8193, variant="no_bias"),
    case(M=33, N=100, variant="no_affine"),
    case(M=9, N=300, variant="no_weight"),  # F.layer_norm(x, shape, None, bias): torch takes it too
    case(M=4099, N=1000, sets=GPU, variant="no_bias"),
    case(M=257, N=16385, sets=GPU, variant="no_affine"),
    # bias-free LayerNorm as models run it
    case(M=4096, N=4096, sets=BENCH, dtypes=LLM, variant="no_bias"),
)

RMS_NORM = Op(
    name="rms_norm",
    description="y = x / sqrt(mean(x^2) + eps) * weight over the last dim; rstd kept for the backward",
    inputs=("x", "weight"),
    optional=("weight",),  # nn.RMSNorm(d, elementwise_affine=False)
    # 0.1 changes rstd by ~5% on unit-variance rows, so a kernel that drops eps fails.
    params=(Param("eps", 1e-6, (1e-6, 0.1), description="added to the mean square"),),
    outputs=(
        Output("y", description="x's dtype"),
        Output("rstd", dtype="float32", tolerances=tol.RSTD, differentiable=False, returned=False,
               description="1 / sqrt(mean(x^2) + eps) per row"),
    ),
    grads=("x", "weight"),
    grad_tolerances=tol.GRADS,
    reference=f"{PKG}.op:rms_norm_reference",
    make_inputs=f"{PKG}.op:rms_norm_inputs",
    make_output=f"{PKG}.op:rms_norm_outputs",
    cases=RMS_CASES,
    dtypes=DTYPES,
    tolerances=tol.RMS_NORM,
    cost=f"{PKG}.op:rms_norm_cost",
    backward_cost=f"{PKG}.op:rms_norm_backward_cost",
    bound="memory",
    peer=f"{PKG}.op:rms_norm_peer",
    peer_name="F.rms_norm",
    autocast="unchanged",  # as F.rms_norm: on none of torch.autocast's lists (CUDA and the CPU)
    full_peer=f"{PKG}.op:rms_norm_full_peer",
    rivals={"torch.compile": f"{PKG}.op:rms_norm_compiled"},
    contract=tkreg.contracts.rows(),
)

LAYER_NORM = Op(
    name="layer_norm",
    description="y = (x - mean) / sqrt(var + eps) * weight + bias over the last dim; mean and rstd kept",
    inputs=("x", "weight", "bias"),
    optional=("weight", "bias"),  # nn.LayerNorm(d, bias=False), nn.LayerNorm(d, elementwise_affine=False)
    params=(Param("eps", 1e-5, (1e-5, 0.1), description="added to the variance"),),
    outputs=(
        Output("y", description="x's dtype"),
        Output("mean", dtype="float32", tolerances=tol.MEAN, differentiable=False, returned=False),
        Output("rstd", dtype="float32", tolerances=tol.RSTD, differentiable=False, returned=False),
    ),
    grads=("x", "weight", "bias"),
    grad_tolerances=tol.GRADS,
    reference=f"{PKG}.op:layer_norm_reference",
    make_inputs=f"{PKG}.op:layer_norm_inputs",
    make_output=f"{PKG}.op:layer_norm_outputs",
    cases=LAYER_CASES,
    dtypes=DTYPES,
    tolerances=tol.LAYER_NORM,
    cost=f"{PKG}.op:layer_norm_cost",
    backward_cost=f"{PKG}.op:layer_norm_backward_cost",
    bound="memory",
    peer=f"{PKG}.op:layer_norm_peer",
    peer_name="F.layer_norm",
    autocast={"cuda": "float32", "cpu": "unchanged"},  # as F.layer_norm: float32 on torch's CUDA list, on none for the CPU
    full_peer=f"{PKG}.op:layer_norm_full_peer",
    rivals={"torch.compile": f"{PKG}.op:layer_norm_compiled"},
    contract=tkreg.contracts.rows(),
)

# Contiguous rows of 16-byte aligned tensors are read and written 16 bytes at a time.
VECTOR_TARGETS = (CompileTarget("sm_90a", ptx=(r"ld\.global(\.\w+)*\.v4",), sass=(r"LDG\.E\.128",)),)
FORWARD_TARGETS = (
    CompileTarget("sm_90a", ptx=(r"ld\.global(\.\w+)*\.v4", r"st\.global(\.\w+)*\.v4"), sass=(r"LDG\.E\.128", r"STG\.E\.128")),
)
# Compile items: the plans of the benchmark widths (fused, 8 and 16 warps), a looped row and,
# for the backward, the partial-sum reduction ("N" and "stage" are read by the aot functions).
FORWARD_COMPILE = ({"N": 4096}, {"N": 8192}, {"N": 65536})
# 5120: a row padded to its power of two, which the backward pipelines deepest in 16-bit.
BACKWARD_COMPILE = ({"N": 4096}, {"N": 5120}, {"N": 8192}, {"N": 65536}, {"stage": "sum"})
# Test configs besides the launcher's own choice ({}): 256-element blocks, so rows from 257
# elements take the looped kernels and narrower ones share programs two rows at a time; the
# backward's rows split over at most 8 programs, so under the interpreter programs take several
# steps (33 rows: 3 steps of 2 rows) and several rows of a looped row sum (9 x 300: 2).
FORWARD_CONFIGS: tuple[dict[str, Any], ...] = ({}, {"BLOCK": 256, "ROWS": 2, "num_warps": 2})
BACKWARD_CONFIGS: tuple[dict[str, Any], ...] = ({}, {"BLOCK": 256, "ROWS": 2, "programs": 8, "num_warps": 2})


def _kernel(name: str, op: str, backward: bool, description: str) -> Kernel:
    what = "backward" if backward else "forward"
    return Kernel(
        name=name,
        op=op,
        launcher=f"{PKG}.launch:{op}_{what}",
        requires=Requirements(
            min_capability="8.0",  # bf16 loads and conversions
            inputs=f"{PKG}.checks:{what}_inputs_reasons",
        ),
        interpretable=True,
        targets=VECTOR_TARGETS if backward else FORWARD_TARGETS,
        aot=f"{PKG}.launch:aot_{op}_{what}",
        configs=BACKWARD_CONFIGS if backward else FORWARD_CONFIGS,
        bench_configs=({},),
        compile_configs=BACKWARD_COMPILE if backward else FORWARD_COMPILE,
        backward=backward,
        # The forward launches one kernel on the call's tensors; the backward adds a partial-sum
        # buffer of its own, which a replay cannot renew.
        replay=not backward,
        description=description,
    )


KERNELS = (
    _kernel("rms_norm_triton", "rms_norm", False,
            "Triton: rows up to 16384 in registers (several rows per program when narrow), longer rows looped"),
    _kernel("rms_norm_bwd_triton", "rms_norm", True,
            "Triton: persistent row ranges, dx per row, fp32 partial weight gradients summed in a fixed order"),
    _kernel("layer_norm_triton", "layer_norm", False,
            "Triton: rows up to 16384 in registers (several rows per program when narrow), longer rows looped"),
    _kernel("layer_norm_bwd_triton", "layer_norm", True,
            "Triton: persistent row ranges, dx per row, fp32 partial weight and bias gradients summed in a fixed order"),
)


@tkreg.hookimpl
def tkreg_register_ops(register: Callable[[Op], None]) -> None:
    register(RMS_NORM)
    register(LAYER_NORM)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    for kernel in KERNELS:
        register(kernel)
