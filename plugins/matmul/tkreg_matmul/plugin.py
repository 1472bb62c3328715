"""Hook implementations: the ``matmul`` op and the portable ``matmul_triton`` kernel. Specs only;
importing this module imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

import tkreg
from tkreg import CompileTarget, Kernel, Op, Requirements, case

# Both import neither torch nor triton.
from .configs import DECODE, LARGE, MEDIUM, SMALL
from .op import DTYPES, TOLERANCES

BENCH_K = (512, 1024, 2048, 4096, 8192, 16384)
BENCH_MN = 8192
# Llama-3-8B-like projections: (M, 4096) x (4096 -> 4096 (attention out), 6144 (fused QKV with
# grouped KV heads), 14336 (MLP up/gate)) and (M, 14336) x (14336 -> 4096) (MLP down), for decode
# (M = 16), short prefill (128) and long prefill (2048, 16384) token counts.
LLAMA_NK = ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336))
LLAMA_M = (16, 128, 2048, 16384)
# B layouts of the benchmark suite: x @ w (row-major (K, N)) and x @ W.t() (an nn.Linear weight).
BENCH_LAYOUTS = ("", "weight")
# Odd but TMA-legal: no size a multiple of any tile, rows still 16-byte aligned.
ODD_BENCH = ((3000, 5000, 2000),)
# nn.Linear with a bias: Qwen2-7B's fused q, k and v projection (3584 -> 28 + 2 * 4 heads of 128),
# whose bias the peer adds in cuBLAS's epilogue, at decode and prefill token counts.
BIAS_BENCH = ((16, 4608, 3584), (2048, 4608, 3584))

TIMER_K = 4096  # `tkreg bench timer` checks the device timer on 8192 x 8192 x 4096 and 4096^3
# `tkreg bench ranking` measures the benchmark cases in the plain layout and the "ranking" cases in
# theirs: a short prefill projection, an odd and a small product, B as (K, N) and as a weight.
RANKED_PROJECTION = (128, 4096, 4096)

BENCH_CASES = (
    *(case(M=m, N=n, K=k, sets=("bench", "ranking") if (m, n, k) == RANKED_PROJECTION else ("bench",), variant=v)
      for m in LLAMA_M for n, k in LLAMA_NK for v in BENCH_LAYOUTS),
    *(case(M=m, N=n, K=k, sets=("bench",), variant=v) for m, n, k in ODD_BENCH for v in BENCH_LAYOUTS),
    *(case(M=m, N=n, K=k, sets=("bench",), variant="weight-bias") for m, n, k in BIAS_BENCH),
    *(case(M=BENCH_MN, N=BENCH_MN, K=k, sets=("bench", "timer") if k == TIMER_K else ("bench",)) for k in BENCH_K),
)
RANKING_CASES = tuple(case(M=m, N=n, K=k, sets=("ranking",), variant=v)
                      for m, n, k in ((1000, 1000, 1000), (256, 256, 256)) for v in BENCH_LAYOUTS)

BATCHED_CASES = (
    case(B=3, M=33, N=40, K=24, variant="batched"),
    case(B=1, M=16, N=8, K=8, variant="batched"),
    case(B=2, M=129, N=136, K=72, variant="batched-weight"),
    case(B=5, M=1, N=72, K=296, variant="batched"),
)

# nn.Linear(bias=True): a bias (N,) added in the epilogue. Odd sizes (no tile divides N, a masked
# bias tail), a single row and a single column, B in both layouts and strided, and batches (one
# bias for every batch).
BIAS_CASES = (
    case(M=129, N=136, K=72, variant="bias"),
    case(M=97, N=264, K=304, variant="weight-bias"),
    case(M=1, N=72, K=296, variant="weight-bias"),
    case(M=33, N=33, K=33, variant="bias"),
    case(M=136, N=1, K=40, variant="bias"),
    case(M=129, N=136, K=72, variant="strided-bias"),
    case(M=129, N=136, K=72, variant="transposed-bias"),
    case(B=3, M=33, N=40, K=24, variant="batched-bias"),
    case(B=2, M=129, N=136, K=72, variant="batched-weight-bias"),
    case(M=16, N=4096, K=4104, sets=("gpu", "full"), variant="weight-bias"),
    case(M=2048, N=4096, K=4096, sets=("gpu", "full"), variant="weight-bias"),
)

CASES = (
    # The warp-specialization seed's test shapes.
    case(M=208, N=416, K=304),
    # Multiples of no block size; K tail of 8 after 64-wide K blocks.
    case(M=129, N=136, K=72),
    case(M=300, N=520, K=1000),
    # A single row; K smaller than every BLOCK_K.
    case(M=1, N=8, K=8),
    # A single row with K over several K blocks, so split-K configs really split: the reduce kernel
    # then sees M = 1, which triton specializes to a constant (it failed to compile, H100 2026-11-23).
    case(M=1, N=72, K=296),
    case(M=1, N=72, K=296, variant="weight"),
    case(M=72, N=200, K=16),
    # A single column: N * 2 bytes is not a multiple of 16, so TMA kernels must refuse it.
    case(M=136, N=1, K=40),
    # K and N odd: TMA-illegal, the portable kernel must still pass and TMA kernels refuse.
    case(M=33, N=33, K=33),
    # Row strides wider than the rows (TMA-legal), and column-major operands (TMA-illegal).
    case(M=129, N=136, K=72, variant="strided"),
    case(M=129, N=136, K=72, variant="transposed"),
    # B as an nn.Linear weight: the transposed view of a row-major (N, K) tensor, read as stored.
    case(M=97, N=264, K=304, variant="weight"),
    case(M=129, N=136, K=72, variant="weight"),
    case(M=1, N=8, K=8, variant="weight"),
    case(M=129, N=136, K=296, variant="weight-strided"),
    # K odd: the weight's rows are not 16-byte aligned, so TMA kernels must refuse it.
    case(M=16, N=40, K=33, variant="weight"),
    # The seed's large test shape: about 15 s per config and dtype under the CPU interpreter, so it
    # is in every GPU run ("gpu") but interpreted only with --tkreg-full.
    case(M=2000, N=1000, K=2000, sets=("gpu", "full")),
    case(M=1000, N=2000, K=4096, sets=("gpu", "full"), variant="strided"),
    # Decode and short prefill against a weight (few output tiles: split-K and narrow tiles).
    case(M=16, N=4096, K=4104, sets=("gpu", "full"), variant="weight"),
    case(M=100, N=1000, K=2008, sets=("gpu", "full"), variant="weight"),
    *BENCH_CASES,
    case(M=4096, N=4096, K=4096, sets=("timer",)),
    *RANKING_CASES,
    # Batches of products (the linear contract passes a batch of different B as 3-D tensors): odd
    # sizes, a single batch, B as a batch of weights' transposes, and one row per batch.
    *BATCHED_CASES,
    *BIAS_CASES,
)

MATMUL = Op(
    name="matmul",
    reference="tkreg_matmul.op:reference",
    make_inputs="tkreg_matmul.op:make_inputs",
    make_output="tkreg_matmul.op:make_output",
    cases=CASES,
    dtypes=DTYPES,
    tolerances=TOLERANCES,  # the error argument is written in tkreg_matmul.op
    cost="tkreg_matmul.op:cost",
    bound="compute",
    # B as given: cuBLAS reads a weight's transposed view as stored (TN), as F.linear does; with a
    # bias, F.linear's own call (the bias in cuBLAS's epilogue)
    peer="tkreg_matmul.op:peer",
    peer_name="torch.matmul",
    peer_direct="tkreg_matmul.op:peer_direct",
    autocast="lower",  # as torch.matmul: autocast computes it in the region's lower-precision dtype
    measured="tkreg_matmul:measured",
    tolerance_scale="tkreg_matmul.op:tolerance_scale",
    # Benchmarks in bf16 only, so the whole benchmark run stays near two minutes (both dtypes
    # double the matmul share); scripts/gpu/matmul_suite.py times fp16 as well.
    bench_dtypes=("bfloat16",),
    description="C = A @ B (+ bias); A (M, K), B (K, N) row-major or the transpose of an (N, K) weight, bias (N,) "
    "or None; fp16/bf16 inputs, fp32 accumulation, C in the input dtype",
    inputs=("a", "b", "bias"),
    optional=("bias",),  # nn.Linear(bias=True): matmul(x, W.t(), b) is F.linear(x, W, b)
    grads=("a", "b", "bias"),
    backward="tkreg_matmul.op:backward",
    # callers pass A (..., K) (leading dims merged into rows) or batches (B, M, K) @ (B, K, N)
    contract=tkreg.contracts.linear(batched=True, shape_class="tkreg_matmul.shapes:shape_class"),
)

MATMUL_TRITON = Kernel(
    name="matmul_triton",
    op="matmul",
    launcher="tkreg_matmul.triton_kernel:matmul_triton",
    requires=Requirements(min_capability="8.0", triton=">=3.6", inputs="tkreg_matmul.checks:matrix_inputs_reasons"),
    interpretable=True,
    targets=(
        CompileTarget(
            "sm_80",
            ptx=(r"mma\.sync\.aligned\.m16n8k16", r"cp\.async\.cg\.shared\.global .*0x10"),
            sass=(r"HMMA\.16816\.F32", r"LDGSTS\.E\.BYPASS\.128"),
        ),
        CompileTarget(
            "sm_90a",
            ptx=(r"wgmma\.mma_async", r"cp\.async\.cg\.shared\.global .*0x10"),
            sass=(r"HGMMA\.64x\d+x16\.F32", r"LDGSTS\.E\.BYPASS\.128"),
        ),
    ),
    aot="tkreg_matmul.triton_aot:matmul_triton_aot",
    # Tests: the largest and smallest tiles, and the 16-row decode tile (another dot shape: mma.sync
    # rather than wgmma on sm_90a). The launcher chooses among more (tkreg_matmul.configs.CANDIDATES).
    configs=(LARGE, MEDIUM, SMALL, DECODE),
    # Benchmarks time what a user gets: the launcher's choice for each shape.
    bench_configs=({},),
    # Compile items: B in both layouts for the default tile, and with a bias epilogue; tiles of 64
    # rows or more (wgmma on sm_90a).
    compile_configs=({**LARGE, "b_layout": "kn"}, {**LARGE, "b_layout": "nk"}, {**LARGE, "b_layout": "nk", "bias": True},
                     MEDIUM, SMALL),
    priority=0,
    replay=True,  # one launch on the call's tensors, its tile fixed by the signature
    description="portable tl.dot matmul: masked loads for any shape and strides (16-byte loads where sizes "
    "allow), grouped tile order, software-pipelined (cp.async) on sm_80+, wgmma on sm_90a, tile chosen per shape",
)


MATMUL_TRITON_BATCHED = Kernel(
    name="matmul_triton_batched",
    op="matmul",
    launcher="tkreg_matmul.batched:matmul_triton_batched",
    requires=Requirements(min_capability="8.0", triton=">=3.6", inputs="tkreg_matmul.checks:batched_operand_reasons"),
    interpretable=True,
    targets=MATMUL_TRITON.targets,
    aot="tkreg_matmul.triton_aot:matmul_triton_batched_aot",
    configs=(MEDIUM, SMALL, DECODE),
    bench_configs=({},),
    compile_configs=({**LARGE, "b_layout": "kn"}, {**LARGE, "b_layout": "nk"}),
    priority=0,
    description="batched tl.dot matmul, one launch for every batch (batches on the grid's second axis): "
    "A (Bt, M, K) @ B (Bt, K, N) with any strides, the tile of matmul_triton",
)


@tkreg.hookimpl
def tkreg_register_ops(register: Callable[[Op], None]) -> None:
    register(MATMUL)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(MATMUL_TRITON)
    register(MATMUL_TRITON_BATCHED)
