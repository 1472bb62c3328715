"""tkreg registration for liger-kernel 0.8.5: specs only, no torch and no triton.

- rms_norm, layer_norm: the built-in ops of the `norms` plugin. Kernels here compute them with
  liger's Triton kernels, forward and backward, matching those ops' inputs, `eps` parameter,
  outputs (y, and the fp32 statistics kept for the backward) and gradients.
- swiglu: silu(a) * b, an op of this plugin, forward and backward.
- cross_entropy: per-token cross-entropy over (M, V) logits with int64 targets, an op of this
  plugin, with liger's ignore_index, label_smoothing, reduction and z-loss (lse_square_scale).

Every launcher calls liger's own @triton.jit kernels (liger_kernel.ops.*) with liger's own
launch settings; nothing of liger's kernels is copied. See the module docstrings of
tkreg_liger.norms, tkreg_liger.swiglu and tkreg_liger.cross_entropy for what differs from liger's
Python wrappers, and why.
"""

import tkreg
from tkreg.core.tolerances import ONE_ROUNDING

NORMS = "tkreg_liger.norms"
SWIGLU = "tkreg_liger.swiglu"
XENT = "tkreg_liger.cross_entropy"

HALF = ("float16", "bfloat16")
FLOATS = ("float32", *HALF)

# bf16 needs capability 8.0; liger's kernels are plain Triton otherwise. libdevice (rsqrt) is
# imported from triton.language.extra, which exists from triton 3.0 on.
GPU = dict(min_capability=(8, 0), triton=">=3.0")

# What the compile items check, for sm_90a (H100): the instructions these kernels rely on.
# Norms: 128-bit row loads (rows aligned to 16 bytes, as the JIT specializes them), and the
# forward's rsqrt. Softmax and sigmoid: exp2.
V4 = (r"ld\.global(\.\w+)*\.v4",), (r"LDG\.E\.128",)
NORM_FWD = tkreg.CompileTarget("sm_90a", ptx=(r"rsqrt\.approx",) + V4[0], sass=(r"MUFU\.RSQ",) + V4[1])
NORM_BWD = tkreg.CompileTarget("sm_90a", ptx=V4[0], sass=V4[1])
EXP2 = tkreg.CompileTarget("sm_90a", ptx=(r"ex2\.approx",), sass=(r"MUFU\.EX2",))

# ---------------------------------------------------------------------------------------------
# swiglu tolerances (U = unit roundoff of the dtype)
#
# Forward: liger computes silu(a) in fp32, rounds it to b's dtype, multiplies by b and rounds
# again. Two roundings are at most 2U from the exact value, so at most 3U from the float64
# reference rounded once: within ONE_ROUNDING's 4U for fp16 and bf16. fp16 results under 2^-14
# are subnormal, where each rounding is absolute (half of 2^-24): atol 2^-23 covers three.
# fp32: sigmoid goes through exp of -a; the product a * log2(e) loses about |a| ulps of the
# result for |a| <= 6 (standard-normal inputs), sigmoid's add and divide, silu's and b's products
# about 4 more: <= 16U, so 2^-19 (32U).
SWIGLU_TOL = {
    "float32": tkreg.Tolerance(0.0, 2**-19),
    "float16": tkreg.Tolerance(2**-23, ONE_ROUNDING["float16"].rtol),
    "bfloat16": tkreg.Tolerance(0.0, ONE_ROUNDING["bfloat16"].rtol),
}
# Backward: both gradients are computed in fp32 and rounded once to the input's dtype.
# d silu / da = sigmoid + silu * (1 - sigmoid) crosses zero near a = -1.28, where its two terms
# (each below 0.3) cancel: an absolute error of about 8 fp32 ulps of 1, times |dc * b| (< 32 for
# standard-normal inputs and upstream gradients): atol 2^-17 (256 fp32 ulps of 1), every dtype.
SWIGLU_GRAD_TOL = {
    "float32": tkreg.Tolerance(2**-17, 2**-19),
    "float16": tkreg.Tolerance(2**-17, ONE_ROUNDING["float16"].rtol),
    "bfloat16": tkreg.Tolerance(2**-17, ONE_ROUNDING["bfloat16"].rtol),
}

# ---------------------------------------------------------------------------------------------
# cross_entropy tolerances
#
# Loss, per row: lse - x_y (and the smoothing and z-loss terms) in fp32, lse from an online
# log-sum-exp over V in blocks of up to 32768 (tree sums: log2(32768) = 15 roundings, one more
# per block, exp2 of a rounded argument): below about 24 fp32 ulps of max(|lse|, |x_y|) < 16,
# i.e. < 2.3e-5 absolute, which is < 2^-16 of any loss above 1.5 (random logits give losses
# near log V). mean and sum add torch.sum's log2(M) roundings of positive terms.
# bf16: each row's loss is rounded to bf16 (liger keeps losses in the logits' dtype), then mean
# and sum round the fp32-accumulated sum once more: <= 3U from the reference rounded once.
XENT_TOL = {
    "float32": tkreg.Tolerance(2**-16, 2**-16),
    "bfloat16": tkreg.Tolerance(2**-16, ONE_ROUNDING["bfloat16"].rtol),
}
# Gradient w.r.t. logits: softmax(x) - smoothing/V - (1 - smoothing) * onehot (+ z-loss term),
# / n_kept for mean, in fp32: exp2 of (x - max) * log2(e) (|x - max| < ~10: <= 10 ulps), divided
# by the sum (<= 24 ulps): <= ~40U relative, so 2^-17 (128U). With label smoothing, softmax(x_i)
# and smoothing/V cancel; the absolute error there is ~40U * smoothing/V * |upstream| (< 4),
# so atol = 2^-18 * (1/V): the op's tolerance_scale supplies 1/V. The backward kernel multiplies
# the fp32-computed, once-rounded gradient by the upstream gradient (liger's
# cross_entropy_backward) and rounds again: <= 3U for bf16.
XENT_GRAD_TOL = {
    "float32": tkreg.Tolerance(2**-18, 2**-17),
    "bfloat16": tkreg.Tolerance(2**-18, ONE_ROUNDING["bfloat16"].rtol),
}


@tkreg.hookimpl
def tkreg_register_ops(register):
    register(tkreg.Op(
        name="swiglu",
        description="c = silu(a) * b (SwiGLU's gate), elementwise",
        inputs=("a", "b"),
        grads=("a", "b"),
        grad_tolerances=SWIGLU_GRAD_TOL,
        contract=tkreg.contracts.elementwise(),
        reference=f"{SWIGLU}:reference",
        make_inputs=f"{SWIGLU}:make_inputs",
        make_output=f"{SWIGLU}:make_output",
        cases=(
            tkreg.case(M=1, N=1), tkreg.case(M=3, N=7), tkreg.case(M=5, N=1000),
            tkreg.case(M=2, N=8193),
            tkreg.case(M=2, N=65537),                  # over liger's 65536-column limit: refused
            tkreg.case(M=33, N=100, variant="padded"),  # strided rows: forward refuses them
            tkreg.case(M=4099, N=1000, sets=("gpu",)), tkreg.case(M=1000, N=14336, sets=("gpu",)),
            tkreg.case(M=4096, N=11008, sets=("bench",)),   # Llama-2 7B MLP, 4096 tokens
            tkreg.case(M=4096, N=14336, sets=("bench",)),   # Llama-3 8B / Mistral 7B MLP
            tkreg.case(M=16384, N=14336, sets=("bench",)),
        ),
        dtypes=FLOATS,
        bench_dtypes=("bfloat16",),
        tolerances=SWIGLU_TOL,
        cost=f"{SWIGLU}:cost",
        backward_cost=f"{SWIGLU}:backward_cost",
        peer=f"{SWIGLU}:peer",
        peer_name="F.silu(a) * b",
    ))
    register(tkreg.Op(
        name="cross_entropy",
        description="per-token cross-entropy of logits (M, V) and int64 targets (M,), "
                    "with ignore_index, label smoothing, reduction and z-loss",
        inputs=("logits", "targets"),
        params=(
            tkreg.Param("ignore_index", -100, values=(-100, 1),
                        description="targets equal to it are padding: no loss, no gradient"),
            tkreg.Param("label_smoothing", 0.0, values=(0.0, 0.1),
                        description="weight of the uniform distribution mixed into the target"),
            tkreg.Param("reduction", "mean", values=("mean", "sum", "none"),
                        description="mean over the kept tokens, their sum, or one loss per token"),
            tkreg.Param("lse_square_scale", 0.0, values=(0.0, 1e-4),
                        description="z-loss: adds lse_square_scale * logsumexp(logits)^2 per kept token"),
        ),
        outputs=(tkreg.Output("loss", tolerances=XENT_TOL,
                              description="in the logits' dtype: 0-d for mean and sum, (M,) for none"),),
        grads=("logits",),
        grad_tolerances=XENT_GRAD_TOL,
        contract=tkreg.contracts.rows(),
        reference=f"{XENT}:reference",
        make_inputs=f"{XENT}:make_inputs",
        make_output=f"{XENT}:make_output",
        cases=(
            tkreg.case(M=1, N=1), tkreg.case(M=5, N=7), tkreg.case(M=9, N=300),
            tkreg.case(M=9, N=300, variant="padded"),   # rows strided: logits[:, :V] of a wider buffer
            tkreg.case(M=3, N=40000),                   # V over liger's 32768 block: looped
            tkreg.case(M=4099, N=1000, sets=("gpu",)), tkreg.case(M=1024, N=32000, sets=("gpu",)),
            tkreg.case(M=257, N=128256, sets=("gpu",)),
            tkreg.case(M=4096, N=32000, sets=("bench",)),    # Llama-2 vocabulary
            tkreg.case(M=4096, N=128256, sets=("bench",)),   # Llama-3 vocabulary
            tkreg.case(M=16384, N=32000, sets=("bench",)),
        ),
        dtypes=("float32", "bfloat16"),
        tolerances=XENT_TOL,
        tolerance_scale=f"{XENT}:tolerance_scale",
        cost=f"{XENT}:cost",
        backward_cost=f"{XENT}:backward_cost",
        peer=f"{XENT}:peer",
        peer_name="F.cross_entropy",
    ))


@tkreg.hookimpl
def tkreg_register_kernels(register):
    # ---- norms: the `norms` plugin's ops ------------------------------------------------------
    fwd = tkreg.Requirements(**GPU, inputs=f"{NORMS}:rms_norm_forward_reasons")
    bwd = tkreg.Requirements(**GPU, inputs=f"{NORMS}:rms_norm_backward_reasons")
    # path=block forces liger's 16-rows-per-program kernels, which liger itself picks only for
    # rows of at most 256 elements when there are 32768 rows or more (qk-norm of 128-wide heads).
    rms_configs = ({}, {"path": "block"})
    # priority -1: without a measurement on the caller's GPU (tuning off, no GPU), tkreg.ops keeps
    # calling the norms plugin's own kernels; with one, the faster kernel wins either way.
    norm = dict(priority=-1, interpretable=True)
    register(tkreg.Kernel(
        name="liger_rms_norm", op="rms_norm", launcher=f"{NORMS}:rms_norm_forward",
        requires=fwd, configs=rms_configs, **norm,
        targets=(NORM_FWD,), aot=f"{NORMS}:rms_norm_forward_aot",
        description="liger-kernel 0.8.5 _rms_norm_forward_kernel (one row per program; "
                    "_block_ kernel for short rows), fp32 arithmetic (casting_mode='gemma', offset 0)",
    ))
    register(tkreg.Kernel(
        name="liger_rms_norm_bwd", op="rms_norm", launcher=f"{NORMS}:rms_norm_backward",
        backward=True, requires=bwd, configs=rms_configs, **norm,
        targets=(NORM_BWD,), aot=f"{NORMS}:rms_norm_backward_aot",
        description="liger-kernel 0.8.5 _rms_norm_backward_kernel: a row range per SM, "
                    "fp32 partial weight gradients summed by torch",
    ))
    fwd = tkreg.Requirements(**GPU, inputs=f"{NORMS}:layer_norm_forward_reasons")
    bwd = tkreg.Requirements(**GPU, inputs=f"{NORMS}:layer_norm_backward_reasons")
    register(tkreg.Kernel(
        name="liger_layer_norm", op="layer_norm", launcher=f"{NORMS}:layer_norm_forward",
        requires=fwd, **norm,
        targets=(NORM_FWD,), aot=f"{NORMS}:layer_norm_forward_aot",
        description="liger-kernel 0.8.5 _layer_norm_forward_kernel: one row per program, fp32 statistics",
    ))
    register(tkreg.Kernel(
        name="liger_layer_norm_bwd", op="layer_norm", launcher=f"{NORMS}:layer_norm_backward",
        backward=True, requires=bwd, **norm,
        targets=(NORM_BWD,), aot=f"{NORMS}:layer_norm_backward_aot",
        description="liger-kernel 0.8.5 _layer_norm_backward_kernel: a row range per SM, "
                    "fp32 partial weight and bias gradients summed by torch",
    ))

    # ---- swiglu -------------------------------------------------------------------------------
    register(tkreg.Kernel(
        name="liger_swiglu", op="swiglu", launcher=f"{SWIGLU}:swiglu_forward",
        requires=tkreg.Requirements(**GPU, inputs=f"{SWIGLU}:forward_reasons"), interpretable=True,
        targets=(EXP2,), aot=f"{SWIGLU}:forward_aot",
        description="liger-kernel 0.8.5 _swiglu_forward_kernel (column-tiled variant on Blackwell)",
    ))
    register(tkreg.Kernel(
        name="liger_swiglu_bwd", op="swiglu", launcher=f"{SWIGLU}:swiglu_backward",
        backward=True,
        requires=tkreg.Requirements(**GPU, inputs=f"{SWIGLU}:backward_reasons"), interpretable=True,
        targets=(EXP2,), aot=f"{SWIGLU}:backward_aot",
        description="liger-kernel 0.8.5 _swiglu_backward_kernel, run on copies of a and b "
                    "(liger overwrites a and b with their gradients)",
    ))

    # ---- cross_entropy ------------------------------------------------------------------------
    fwd = tkreg.Requirements(**GPU, inputs=f"{XENT}:forward_reasons")
    register(tkreg.Kernel(  # registered first: bench-fwdbwd pairs the backward with it
        name="liger_cross_entropy", op="cross_entropy", launcher=f"{XENT}:cross_entropy_forward",
        requires=fwd, interpretable=True,
        targets=(EXP2,), aot=f"{XENT}:forward_aot",
        description="liger-kernel 0.8.5 liger_cross_entropy_kernel without gradients and without "
                    "a host sync; logits left unchanged (ignored rows are computed, then masked)",
    ))
    register(tkreg.Kernel(
        name="liger_cross_entropy_fused", op="cross_entropy",
        launcher=f"{XENT}:cross_entropy_fused",
        requires=fwd, interpretable=True,
        writes=(tkreg.Writes("logits", expect=f"{XENT}:gradient_in_logits",
                             tolerances=XENT_GRAD_TOL),),
        targets=(EXP2,), aot=f"{XENT}:fused_aot",
        description="liger-kernel 0.8.5 liger_cross_entropy_kernel as liger trains with it: the "
                    "loss, and d(sum of loss)/d(logits) written over the logits",
    ))
    register(tkreg.Kernel(
        name="liger_cross_entropy_bwd", op="cross_entropy",
        launcher=f"{XENT}:cross_entropy_backward", backward=True,
        requires=tkreg.Requirements(**GPU, inputs=f"{XENT}:backward_reasons"), interpretable=True,
        targets=(EXP2,), aot=f"{XENT}:backward_aot",
        description="liger-kernel 0.8.5: liger_cross_entropy_kernel on a copy of the logits, "
                    "then scaled by the upstream gradient as liger's cross_entropy_backward does",
    ))
