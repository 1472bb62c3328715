"""Registers the ``add`` op and its portable Triton kernel. Imports neither torch nor triton."""

from __future__ import annotations

from collections.abc import Callable

import tkreg
from tkreg import CompileTarget, Kernel, Op, Requirements, case
from tkreg.core.tolerances import EXACT

from .add_checks import DTYPES

_MOD = "tkreg_elementwise"
DEFAULT_SETS = ("default", "full")
FULL = ("full",)
BENCH = ("bench",)

ADD = Op(
    name="add",
    reference=f"{_MOD}.add_op:reference",
    make_inputs=f"{_MOD}.add_op:make_inputs",
    make_output=f"{_MOD}.add_op:make_output",
    cases=(
        # The seeds' own test shapes (row blocks of 32 x 64 leave partial tiles in both).
        case(M=1000, N=2000),
        case(M=4000, N=120),
        # Not a multiple of any block; rows of 544 (fp32) or 272 (16-bit) bytes stay TMA-legal.
        case(M=257, N=136),
        case(M=1, N=8),
        case(M=1, N=1),
        # Rows of 4 or 2 bytes, 132 or 66: correct on the portable kernel, refused by TMA kernels.
        case(M=8, N=1),
        case(M=33, N=33),
        # The same odd shape inside wider, 16-byte padded rows: TMA-legal, strided.
        case(M=33, N=33, variant="padded"),
        case(M=257, N=136, variant="padded"),
        # A non-unit last stride: only the portable kernel takes it.
        case(M=257, N=136, variant="transposed"),
        case(M=4099, N=1000, sets=FULL),
        case(M=3, N=100000, sets=FULL),
        case(M=2049, N=4104, sets=FULL, variant="padded"),
        case(M=1000, N=777, sets=FULL, variant="transposed"),
        case(M=32768, N=32768, sets=BENCH),
        case(M=1024, N=1024, sets=(*BENCH, "timer")),
        case(M=10000, N=10008, sets=BENCH),
        # `tkreg bench timer` checks the device timer on a large and a small add; `tkreg bench
        # ranking` also measures the sizes between and below the benchmarks that models call.
        case(M=16384, N=16384, sets=("timer",)),
        case(M=4096, N=4096, sets=("ranking",)),
        case(M=256, N=256, sets=("ranking",)),
    ),
    dtypes=DTYPES,
    # One correctly rounded add per element: bit-exact against the rounded float64 reference.
    tolerances={d: EXACT[d] for d in DTYPES},
    cost=f"{_MOD}.add_op:cost",
    bound="memory",
    peer="torch:add",  # the builtin itself: tkreg.ops calls a peer plan without a frame of ours
    peer_name="torch.add",
    autocast="unchanged",  # as torch.add: on none of torch.autocast's lists
    measured=f"{_MOD}:measured",
    description="C = A + B for tensors of one shape and dtype (kernels take them as 2-D views)",
    inputs=("a", "b"),
    grads=("a", "b"),
    backward=f"{_MOD}.add_op:backward",
    # callers' tensors of any rank reach kernels as one 2-D view of both (tkreg.ops.forms)
    contract=tkreg.contracts.elementwise(),
)

# Full blocks vectorize to 16-byte accesses; the compile checks say so.
_VECTOR_TARGETS = tuple(
    CompileTarget(arch, ptx=(r"ld\.global\.v4", r"st\.global\.v4"), sass=(r"LDG\.E\.128", r"STG\.E\.128"))
    for arch in ("sm_80", "sm_90a")
)

ADD_TRITON = Kernel(
    name="add_triton",
    op="add",
    launcher=f"{_MOD}.add_triton:add_triton",
    requires=Requirements(),  # any CUDA GPU triton supports, and the interpreter
    interpretable=True,
    targets=_VECTOR_TARGETS,
    aot=f"{_MOD}.add_triton:aot",
    configs=({"BLOCK": 4096, "num_warps": 8}, {"BLOCK": 1024, "num_warps": 4}),
    bench_configs=({},),
    # Below the Gluon TMA kernels where they run (capability 9.0+, TMA-legal inputs), which are
    # faster on large inputs; the only add kernel elsewhere (BENCHMARKS.md).
    priority=20,
    replay=True,
    description="portable Triton add: any strides, masked tails, 16-byte vector loads when contiguous",
)


@tkreg.hookimpl
def tkreg_register_ops(register: Callable[[Op], None]) -> None:
    register(ADD)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(ADD_TRITON)
