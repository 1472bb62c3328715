"""Hook implementation: the ``matmul_blackwell_ws`` kernel spec (no torch, no triton here)."""

from __future__ import annotations

from collections.abc import Callable

import tkreg
from tkreg import CompileTarget, Kernel, Requirements

_BASE = {"BLOCK_M": 128, "BLOCK_N": 256, "BLOCK_K": 64, "SUBTILE_FACTOR": 4, "num_warps": 4}

MATMUL_BLACKWELL_WS = Kernel(
    name="matmul_blackwell_ws",
    op="matmul",
    launcher="tkreg_blackwell_matmul.launcher:matmul_blackwell_ws",
    requires=Requirements(
        arch="sm_100a",
        # Written against 3.6's Gluon API (warp_specialize list form, get_tmem_reg_layout,
        # constexpr_function aggregates, TensorMemoryLayout col_stride); compiled only with 3.6.0.
        triton=">=3.6,<3.7",
        features=("tcgen05", "tensor_memory", "tma", "warp_specialization"),
        inputs="tkreg_matmul.checks:gluon_matmul_inputs_reasons",
    ),
    interpretable=False,
    targets=(
        CompileTarget(
            "sm_100a",
            ptx=(r"tcgen05\.mma\.cta_group::1", r"cp\.async\.bulk\.tensor\.2d\.shared::cluster\.global", r"tcgen05\.ld\."),
            sass=(r"UTCHMMA", r"UTMALDG\.2D", r"UTMASTG\.2D"),
        ),
    ),
    aot="tkreg_blackwell_matmul.launcher:matmul_blackwell_ws_aot",
    # Buffer counts the seed tests; 4 first: the default and what benchmarks time.
    configs=tuple({**_BASE, "num_buffers": n} for n in (4, 3, 2)),
    # The launcher's default scheduler, named so the registry does not cross it with every scheduler.
    bench_configs=({**_BASE, "num_buffers": 4, "scheduler": "grouped-8"},),
    # Compile items: every buffer count with B row-major, and the default reading B as an (N, K) weight.
    compile_configs=(
        *({**_BASE, "num_buffers": n, "b_layout": "kn"} for n in (4, 3, 2)),
        {**_BASE, "num_buffers": 4, "b_layout": "nk"},
    ),
    takes_scheduler=True,
    priority=20,
    description="persistent warp-specialized tcgen05 matmul (TMA load warp, MMA warp, subtiled epilogue, "
    "double-buffered TMEM accumulator), B as (K, N) or as an (N, K) weight read as stored; "
    "never run: no Blackwell GPU was available",
)


@tkreg.hookimpl
def tkreg_register_kernels(register: Callable[[Kernel], None]) -> None:
    register(MATMUL_BLACKWELL_WS)
