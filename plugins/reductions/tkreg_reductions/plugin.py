"""Hook implementations: the sum_row op and its four kernels. Imports neither torch nor triton."""

from __future__ import annotations

from typing import Any

import tkreg
from tkreg import CompileTarget, Kernel, Op, Requirements, Tolerance, case
from tkreg.core.tolerances import UNIT_ROUNDOFF

PKG = "tkreg_reductions"
DTYPES = ("float32", "float16", "bfloat16")

# The harness compares with the exact sum rounded once to the output dtype. An fp32 accumulation
# differs from the exact sum by its rounding errors: each addition errs by at most u32 = 2^-24 of a
# partial sum; with unit-variance inputs (make_inputs) partial sums are O(sqrt(N)) and the errors,
# of random sign, add up like a random walk over N additions: about u32 * sqrt(N) * sqrt(N) =
# u32 * N. atol = 8 * u32 * N (tolerance_scale supplies N) bounds it with margin while a dropped or
# doubled element (|x| ~ 0.8) fails for every N the correctness cases use. The last rounding of
# the fp32 sum to the output dtype may then land one ulp (2u of that dtype) from the rounded exact
# sum: rtol = 2u.
TOLERANCES = {d: Tolerance(atol=8 * UNIT_ROUNDOFF["float32"], rtol=2 * UNIT_ROUNDOFF[d]) for d in DTYPES}

CASES = (
    # single elements, rows and columns
    case(M=1, N=1),
    case(M=1, N=4097),
    case(M=1025, N=1),
    # sizes that are multiples of no block size
    case(M=1025, N=33),
    case(M=33, N=4097),
    case(M=257, N=1000),
    case(M=1000, N=257),
    # strided: rows sliced out of wider rows (unaligned row starts), and a transposed view
    case(M=129, N=65, variant="colslice"),
    case(M=65, N=129, variant="transposed"),
    # on a GPU (one program per row is slow to interpret): taller and larger odd shapes, and the
    # split path with a ragged last range
    case(M=4097, N=1, sets=("gpu", "full")),
    case(M=4097, N=33, sets=("gpu", "full")),
    case(M=8191, N=4099, sets=("gpu", "full")),
    case(M=3, N=300007, sets=("gpu", "full")),
    case(M=3001, N=5003, sets=("full",)),
    case(M=1, N=131073, sets=("full",)),
    case(M=2, N=20011, sets=("full",), variant="colslice"),
    # benchmarks: square, many medium rows, long rows, narrow rows, few very long rows (the
    # square and the narrow rows also check `tkreg bench timer`'s device timer)
    case(M=16384, N=16384, sets=("bench", "timer")),
    case(M=65536, N=1024, sets=("bench",)),
    case(M=4096, N=131072, sets=("bench",)),
    case(M=1048576, N=32, sets=("bench", "timer")),
    case(M=32, N=1048576, sets=("bench",)),
    # vocabulary-sized rows (GPT-2's 50257 logits per token): rows off 16-byte boundaries
    case(M=2048, N=50257, sets=("bench",)),
    # `tkreg bench ranking`: sizes between and below the benchmarks that models call
    case(M=100000, N=300, sets=("ranking",)),
    case(M=1, N=65536, sets=("ranking",)),
    case(M=2048, N=2048, sets=("ranking",)),
    case(M=256, N=256, sets=("ranking",)),
    # 16-bit rows that one power-of-two block pads by almost half, which sum_row_tiled walks in
    # narrower steps
    case(M=16384, N=2100, sets=("ranking",)),
)


def _plain_triton_targets(vector_loads: bool) -> tuple[CompileTarget, ...]:
    # Contiguous, aligned rows must be read 16 bytes at a time: ld.global.v4 / LDG.E.128, or, in a
    # pipelined loop, 16-byte cp.async copies into shared memory (LDGSTS.E.BYPASS.128).
    ptx = (r"ld\.global(\.\w+)*\.v4|cp\.async\.cg\.shared\.global",) if vector_loads else (r"ld\.global",)
    sass = (r"LDG\.E\.128|LDGSTS\.E(\.\w+)*\.128",) if vector_loads else (r"LDG",)
    return tuple(CompileTarget(arch, ptx=ptx, sass=sass) for arch in ("sm_80", "sm_90a"))


@tkreg.hookimpl
def tkreg_register_ops(register: Any) -> None:
    register(
        Op(
            name="sum_row",
            description="sum over the last dim; fp32 accumulation, output in the input dtype (int64 for integers "
                        "and bools, as torch.sum; kernels take 2-D rows)",
            reference=f"{PKG}.op:reference",
            make_inputs=f"{PKG}.op:make_inputs",
            make_output=f"{PKG}.op:make_output",
            cases=CASES,
            dtypes=DTYPES,
            tolerances=TOLERANCES,
            tolerance_scale=f"{PKG}.op:tolerance_scale",
            cost=f"{PKG}.op:cost",
            bound="memory",
            peer=f"{PKG}.op:peer",
            peer_name="torch.sum",
            autocast={"cuda": "float32", "cpu": "unchanged"},  # as torch.sum: a float32 output on CUDA, none on the CPU
            measured="tkreg_reductions:measured",
            bench_dtypes=("float32", "bfloat16"),
            inputs=("x",),
            grads=("x",),
            backward=f"{PKG}.op:backward",
            # callers' (..., N) tensors reach kernels as (rows, N); kernels are ranked per row class
            contract=tkreg.contracts.rows(shape_class=f"{PKG}.shapes:shape_class"),
        )
    )


def _kernel(name: str, module: str, configs: tuple[dict[str, Any], ...], vector_loads: bool, **kw: Any) -> Kernel:
    """A sum_row kernel, scored for concrete inputs from the measured table."""
    return Kernel(
        name=name,
        op="sum_row",
        launcher=f"{PKG}.{module}:{name}",
        interpretable=True,
        targets=_plain_triton_targets(vector_loads),
        aot=f"{PKG}.{module}:aot_{name}",
        configs=configs,
        score=f"{PKG}.ranking:score_{name}",
        replay=True,  # a split sum's partial buffer is a temporary: tkreg.ops sees it and runs the launcher
        **kw,
    )


@tkreg.hookimpl
def tkreg_register_kernels(register: Any) -> None:
    register(
        _kernel(
            "sum_row",
            "seed_kernels",
            ({},),
            True,
            requires=Requirements(inputs=f"{PKG}.checks:sum_row_inputs_reasons"),
            description="one row per program, the whole row as one block pointer load (tutorial)",
        )
    )
    register(
        _kernel(
            "sum_row_blocked",
            "seed_kernels",
            ({"BLOCK_M": 4}, {"BLOCK_M": 1}),
            True,
            requires=Requirements(inputs=f"{PKG}.checks:sum_row_blocked_inputs_reasons"),
            description="BLOCK_M whole rows per program, grid from the meta-parameters (tutorial)",
        )
    )
    register(
        _kernel(
            "sum_row_blocked_iterative",
            "seed_kernels",
            ({"BLOCK_N": 1024}, {"BLOCK_N": 16}),
            True,
            compile_configs=({"BLOCK_N": 1024},),
            description="one row per program, walked in BLOCK_N steps with tl.advance (tutorial)",
        )
    )
    register(
        _kernel(
            "sum_row_tiled",
            "tiled",
            (
                {},
                {"BLOCK_M": 8, "BLOCK_N": 16, "SPLIT": 3, "NUM_STAGES": 2},
                {"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT": 1},
            ),
            True,
            compile_configs=(
                {},
                {"BLOCK_M": 16, "BLOCK_N": 64, "SPLIT": 1},
                {"BLOCK_M": 1, "BLOCK_N": 1024, "SPLIT": 8, "NUM_STAGES": 3},
                # rows off 16-byte boundaries: still read 16 bytes at a time (narrow rows; a split long row)
                {"REALIGNED": 1, "BLOCK_M": 32, "BLOCK_N": 256},
                {"REALIGNED": 1, "BLOCK_M": 1, "BLOCK_N": 4096, "SPLIT": 2, "NUM_STAGES": 3},
            ),
            description="2-D tiles of several rows, long rows split across programs with a deterministic second pass",
        )
    )
