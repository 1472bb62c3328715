"""Hook implementations: the ``matmul`` op and the portable ``matmul_triton`` kernel. Specs only;
importing this module imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

import tkreg
from tkreg import CompileTarget, Kernel, Op, Requirements, case

# Both import neither torch nor triton.
from .configs import LARGE, MEDIUM, SMALL
from .op import DTYPES, TOLERANCES

BENCH_K = (512, 1024, 2048, 4096, 8192, 16384)
BENCH_MN = 8192

CASES = (
    # The warp-specialization seed's test shapes.
    case(M=208, N=416, K=304),
    # Multiples of no block size; K tail of 8 after 64-wide K blocks.
    case(M=129, N=136, K=72),
    case(M=300, N=520, K=1000),
    # A single row; K smaller than every BLOCK_K.
    case(M=1, N=8, K=8),
    case(M=72, N=200, K=16),
    # A single column: N * 2 bytes is not a multiple of 16, so TMA kernels must refuse it.
    case(M=136, N=1, K=40),
    # K and N odd: TMA-illegal, the portable kernel must still pass and TMA kernels refuse.
    case(M=33, N=33, K=33),
    # Row strides wider than the rows (TMA-legal), and column-major operands (TMA-illegal).
    case(M=129, N=136, K=72, variant="strided"),
    case(M=129, N=136, K=72, variant="transposed"),
    # The seed's large test shape: about 15 s per config and dtype under the CPU interpreter, so it
    # is in every GPU run ("gpu") but interpreted only with --tkreg-full.
    case(M=2000, N=1000, K=2000, sets=("gpu", "full")),
    case(M=1000, N=2000, K=4096, sets=("gpu", "full"), variant="strided"),
    *(case(M=BENCH_MN, N=BENCH_MN, K=k, sets=("bench",)) for k in BENCH_K),
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
    peer="tkreg_matmul.op:peer",
    peer_name="torch.matmul",
    tolerance_scale="tkreg_matmul.op:tolerance_scale",
    description="C = A @ B; A (M, K), B (K, N); fp16/bf16 inputs, fp32 accumulation, C in the input dtype",
)

MATMUL_TRITON = Kernel(
    name="matmul_triton",
    op="matmul",
    launcher="tkreg_matmul.triton_kernel:matmul_triton",
    requires=Requirements(min_capability="8.0", triton=">=3.6"),
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
    configs=(LARGE, MEDIUM, SMALL),
    bench_configs=(LARGE,),
    priority=0,
    description="portable tl.dot matmul: masked loads for any shape and strides, grouped tile order, "
    "software-pipelined (cp.async) on sm_80+, wgmma on sm_90a",
)


@tkreg.hookimpl
def tkreg_register_ops(register: Callable[[Op], None]) -> None:
    register(MATMUL)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(MATMUL_TRITON)
