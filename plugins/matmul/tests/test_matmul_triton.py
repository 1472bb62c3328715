"""matmul_triton on the CPU: correct under the interpreter on every default case (both dtypes), and
compiles for its targets with the instructions it claims."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from tkreg_matmul.choice_table import Entry, Table
from tkreg_matmul.configs import (
    CANDIDATES,
    DECODE,
    INTERPRETER,
    LARGE,
    MEDIUM,
    SMALL,
    TABLE_KIND,
    choose_from,
    estimate,
    model_pick,
    pick_config,
    shared_bytes,
    tiles,
)
from tkreg_matmul.triton_kernel import VECTOR, alignment

from tkreg.core.loading import build_registry
from tkreg.launch.aot import check_code, cuobjdump_path
from tkreg.testing.aot_worker import compile_installed
from tkreg.testing.markers import runs_the_interpreter

# The interpreter must be switched on before the kernel module is imported, so the run happens in a
# fresh process; it prints one line per failing check and "checked N" at the end.
INTERPRETER_RUN = """
import sys
from tkreg.testing.harness import run_check
from tkreg.core.loading import build_registry
reg = build_registry(env={"TKREG_PLUGINS": "matmul"})
kernel = reg.kernel("matmul_triton")
config = dict(kernel.configs[int(sys.argv[1])])
count = 0
for case in reg.op("matmul").cases_in("default"):
    for dtype in ("float16", "bfloat16"):
        result = run_check(reg, kernel, case, dtype, config, seed=7, device="cpu")
        if result.rejected:  # a case of batches: the batched kernel's (its launcher refused them, as declared)
            continue
        count += 1
        if not result.comparison.ok:
            print(result.comparison.report(result.context))
print("checked", count)
"""


@pytest.fixture(scope="module")
def kernel():
    return build_registry(env={"TKREG_PLUGINS": "matmul"}).kernel("matmul_triton")


@runs_the_interpreter
def test_interpreter_default_cases_small_tiles(kernel):
    index = next(i for i, c in enumerate(kernel.configs) if c == SMALL)
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run(
        [sys.executable, "-c", INTERPRETER_RUN, str(index)], env=env, capture_output=True, text=True, timeout=300
    )
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    cases = build_registry(env={"TKREG_PLUGINS": "matmul"}).op("matmul").cases_in("default")
    products = [c for c in cases if "B" not in c.dims]  # every case but the batched ones
    assert lines[-1] == f"checked {2 * len(products)}", run.stdout[-3000:]
    assert len(lines) == 1, run.stdout[-3000:]


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_compiles_for_targets(kernel, arch, dtype):
    target = next(t for t in kernel.targets if t.arch == arch)
    code = compile_installed(kernel.name, arch, dtype, dict(kernel.configs[0]))
    check = check_code(code, target)
    assert check.ok, (check.missing_ptx, check.missing_sass)
    if code.sass:
        assert "LOCAL:0" in code.resources, code.resources


def test_pick_config_interpreter_and_configs():
    assert pick_config(100, 100, 100, device=type("D", (), {"type": "cpu"})()) == INTERPRETER
    assert LARGE in [dict(c) for c in build_registry(env={"TKREG_PLUGINS": "matmul"}).kernel("matmul_triton").configs]


H100 = (132, 232448)  # SMs, shared memory per block (opt-in)


@pytest.mark.parametrize(
    ("sms", "smem", "shape", "expected"),
    [
        (*H100, (8192, 8192, 8192), LARGE),  # large tiles when there are enough of them
        (*H100, (16, 4096, 4096), DECODE),  # 16 rows: no tensor-core rows wasted, long K steps
        (108, 166912, (8192, 8192, 8192), LARGE),  # A100: 163 KiB holds the 144 KiB of LARGE
    ],
)
def test_model_pick(sms, smem, shape, expected):
    assert model_pick(*shape, sms, smem) == expected


def test_model_pick_fits_shared_memory_and_fills_the_gpu():
    # sm_86: 99 KiB per block holds neither LARGE nor MEDIUM.
    assert shared_bytes(model_pick(8192, 8192, 8192, 84, 101376)) <= 101376
    for shape in [(2048, 2048, 4096), (1000, 1000, 1000), (3000, 5000, 2000), (128, 6144, 4096)]:
        pick = model_pick(*shape, *H100)
        assert shared_bytes(pick) <= H100[1]
        # Never a tile so large that fewer than half the SMs get one, where a smaller one would not.
        if tiles(shape[0], shape[1], LARGE) < H100[0] // 2:
            assert pick != LARGE


def test_model_reproduces_the_measured_tile_throughputs():
    """Run 1 (8192^3 bf16, H100): 640, 435 and 277 TFLOP/s for LARGE, MEDIUM, SMALL."""
    flops = 2 * 8192**3
    rates = [flops / estimate(8192, 8192, 8192, c, *H100) / 1e12 for c in (LARGE, MEDIUM, SMALL)]
    assert rates == pytest.approx([640, 435, 277], rel=0.12)


def test_choose_from_a_measured_table():
    tall = dict(CANDIDATES[1])  # 256x128 w8: within the model's margin of LARGE on this shape
    table = Table(TABLE_KIND, (Entry(3000, 5000, 2000, "kn", tall),), {"device": "H100", "date": "2026-11-24"})
    assert choose_from(table, 3000, 5000, 2000, "kn", *H100) == (tall, "measured best at 3000x5000x2000 kn (H100, 2026-11-24)")
    config, why = choose_from(table, 3000, 5000, 2048, "kn", *H100)
    assert config == tall and why.endswith("distance 0.03")
    # Near, but a config the model estimates far slower there: the model's pick.
    small = Table(TABLE_KIND, (Entry(3000, 5000, 2000, "kn", dict(SMALL)),))
    config, why = choose_from(small, 3000, 5000, 2048, "kn", *H100)
    assert config == model_pick(3000, 5000, 2048, *H100) and "estimated slower" in why
    # Far from the table: the model.
    assert choose_from(table, 16, 4096, 4096, "nk", *H100) == (model_pick(16, 4096, 4096, *H100), "model")
    # An entry with other parameters (another version of the kernel), or too big for this GPU: the model.
    odd = Table(TABLE_KIND, (Entry(3000, 5000, 2000, "kn", {"BLOCK": 64}),))
    assert choose_from(odd, 3000, 5000, 2000, "kn", *H100)[1].startswith("model (the table's entry")
    assert choose_from(table, 3000, 5000, 2000, "kn", 84, 101376)[1].startswith("model (the table's entry")


class _Meta:
    def __init__(self, shape, strides):
        self.shape, self._strides = shape, strides

    def stride(self, dim):
        return self._strides[dim]


@pytest.mark.parametrize(
    ("a", "b", "out", "layout", "expected"),
    [
        (((64, 72), (72, 1)), ((72, 136), (136, 1)), ((64, 136), (136, 1)), "kn", 8),
        (((64, 72), (72, 1)), ((72, 136), (1, 72)), ((64, 136), (136, 1)), "nk", 8),
        # N = 5000 is a multiple of 8 (not of 16: the JIT alone would not know it).
        (((3000, 2000), (2000, 1)), ((2000, 5000), (5000, 1)), ((3000, 5000), (5000, 1)), "kn", 8),
        (((33, 33), (33, 1)), ((33, 33), (33, 1)), ((33, 33), (33, 1)), "kn", 1),
        (((64, 72), (72, 1)), ((72, 136), (136, 1)), ((64, 136), (1, 64)), "kn", 1),  # column-major out
        (((64, 72), (72, 1)), ((72, 136), (1, 76)), ((64, 136), (136, 1)), "nk", 1),  # weight rows of 76
        (((64, 72), (72, 1)), ((72, 136), (136, 1)), ((64, 136), (136, 1)), None, 1),  # A not row-major
    ],
)
def test_alignment_only_where_every_load_can_be_16_bytes(a, b, out, layout, expected):
    assert alignment(_Meta(*a), _Meta(*b), _Meta(*out), layout) == expected


REDUCE_RUN = """
import torch
from tkreg_matmul.reduce import BLOCK, reduce_partials
g = torch.Generator().manual_seed(0)
# fp16 and fp32 outputs: triton 3.6's interpreter rounds fp32 -> bf16 by truncation (the GPU rounds
# to nearest even), so a bf16 comparison would test the interpreter, not the kernel.
for split, M, N, dtype in ((3, 5, 200, torch.float32), (4, 1, 2 * BLOCK + 8, torch.float16), (2, 7, 136, torch.float16)):
    ws = torch.randn(split, M, N, generator=g)
    out = torch.full((M, N + 8), float("nan"), dtype=dtype)[:, 4:N + 4]  # strided, poisoned
    reduce_partials(ws, out)
    # Adding the slices in order 0, 1, ... in fp32 and rounding once is what the kernel promises.
    expect = ws[0].clone()
    for s in range(1, split):
        expect += ws[s]
    assert torch.equal(out, expect.to(dtype)), (split, M, N)
print("reduced")
"""


@runs_the_interpreter
def test_split_k_reduction_under_the_interpreter():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", REDUCE_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    assert run.stdout.strip() == "reduced"


# Compiled in a fresh process without TRITON_INTERPRET: under `pytest --tkreg` this worker may run
# the interpreter, which turns the kernel into an interpreter function that cannot be compiled.
ALIGN_RUN = """
import json, re
from tkreg.launch.aot import AotSpec, compile_spec
from tkreg.core.capability import arch
from tkreg_matmul.configs import LARGE
from tkreg_matmul.triton_aot import matmul_triton_aot
counts = {}
for align in (1, 8):
    spec = matmul_triton_aot(arch("sm_90a"), "bfloat16", dict(LARGE))
    # As the JIT specializes 3000 x 5000 x 2000: M, N and the strides of B and C not divisible by 16.
    aligned = tuple(x for x in spec.aligned if x not in ("M", "N", "stride_bk", "stride_cm"))
    spec = AotSpec(spec.fn, spec.signature, {**spec.constexprs, "ALIGN": align}, spec.options, aligned)
    sass = compile_spec(spec, "sm_90a").sass
    ops = ("LDG.E.U16", "STG.E.U16", "LDGSTS.E.BYPASS.128")
    counts[align] = {op: len(re.findall(rf"\\b{re.escape(op)}\\b", sass)) for op in ops}
print(json.dumps(counts))
"""


@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump (shipped with triton) not found")
def test_align_gives_16_byte_loads_where_the_jit_alone_cannot_see_them():
    """3000 x 5000 x 2000: N = 5000 and B's row stride are multiples of 8 but not of 16, so the JIT
    marks them as nothing; without ALIGN the kernel reads B two bytes at a time (LDG.E.U16, outside
    the cp.async pipeline) and writes C two bytes at a time. With ALIGN=8 every load is a 16-byte
    cp.async (LDGSTS.E.BYPASS.128) and every store 16 bytes."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", ALIGN_RUN], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    counts = {int(k): v for k, v in json.loads(run.stdout.strip().splitlines()[-1]).items()}
    assert VECTOR == 8
    assert counts[1]["LDG.E.U16"] > 0 and counts[1]["STG.E.U16"] > 0
    assert counts[8]["LDG.E.U16"] == counts[8]["STG.E.U16"] == 0
    assert counts[8]["LDGSTS.E.BYPASS.128"] > counts[1]["LDGSTS.E.BYPASS.128"]
