"""The reductions plugin on the CPU: input checks, the tiled kernel's shape heuristic, ranking."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
import torch
from tkreg_reductions import checks, ranking, tiled

import tkreg
from tkreg.core.loading import build_registry
from tkreg.launch.aot import cuobjdump_path

LAUNCHERS = ("sum_row", "sum_row_blocked", "sum_row_blocked_iterative", "sum_row_tiled")


@pytest.fixture(scope="module")
def registry() -> tkreg.Registry:
    return build_registry(env={"TKREG_PLUGINS": "reductions"})


def test_plugin_module_imports_neither_torch_nor_triton() -> None:
    code = "import sys, tkreg_reductions.plugin; print('torch' in sys.modules, 'triton' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split() == [
        "False",
        "False",
    ]


@pytest.mark.parametrize("name", LAUNCHERS)
@pytest.mark.parametrize(
    ("x", "message"),
    [
        (torch.ones(4), "x must be 2-D, got shape (4,)"),
        (torch.ones(2, 3, 4), "x must be 2-D"),
        (torch.ones(3, 4, dtype=torch.float64), "x has dtype float64; supported: float32, float16, bfloat16"),
        (torch.ones(3, 4, dtype=torch.int32), "x has dtype int32"),
        (torch.ones(0, 4), "x is empty"),
        ([[1.0, 2.0]], "x must be a torch.Tensor, got list"),
    ],
)
def test_bad_inputs_are_refused_before_launch(registry: tkreg.Registry, name: str, x: object, message: str) -> None:
    launcher = registry.kernel(name).load()
    with pytest.raises(tkreg.InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
        launcher(x)


@pytest.mark.parametrize("name", LAUNCHERS)
def test_cpu_tensors_need_the_interpreter(registry: tkreg.Registry, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(
        tkreg.InputError, match=r"x is on cpu; this kernel needs CUDA tensors \(or CPU tensors with TRITON_INTERPRET=1\)"
    ):
        registry.kernel(name).load()(torch.ones(3, 4))


@pytest.mark.parametrize("name", LAUNCHERS)
def test_a_wrong_out_is_refused(registry: tkreg.Registry, name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check; nothing launches
    launcher = registry.kernel(name).load()
    with pytest.raises(tkreg.InputError, match=r"out has shape \(4,\); expected \(3,\)"):
        launcher(torch.ones(3, 5), out=torch.empty(4))
    with pytest.raises(tkreg.InputError, match="out has dtype float16; expected float32"):
        launcher(torch.ones(3, 5), out=torch.empty(3, dtype=torch.float16))


def test_whole_row_kernels_refuse_rows_they_cannot_hold(registry: tkreg.Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check; nothing launches
    long_rows = torch.ones(2, checks.MAX_BLOCK_ELEMENTS + 1)
    with pytest.raises(tkreg.InputError, match="use sum_row_tiled or sum_row_blocked_iterative"):
        registry.kernel("sum_row").load()(long_rows)
    verdicts = {v.kernel.name: v for v in registry.explain("sum_row", (9, 0), inputs=(long_rows,))}
    assert not verdicts["sum_row"].runs and not verdicts["sum_row_blocked"].runs
    assert verdicts["sum_row_tiled"].runs and verdicts["sum_row_blocked_iterative"].runs
    # sum_row_blocked's limit depends on how many rows it takes per program
    quarter = checks.MAX_BLOCK_ELEMENTS // 4
    assert checks.sum_row_blocked_inputs_reasons(torch.ones(2, quarter), config={"BLOCK_M": 4}) == []
    assert checks.sum_row_blocked_inputs_reasons(torch.ones(2, quarter + 1), config={"BLOCK_M": 4})


@pytest.mark.parametrize(
    ("m", "n", "itemsize"),
    [(16384, 16384, 4), (65536, 1024, 4), (4096, 131072, 2), (1048576, 32, 4), (32, 1048576, 4), (1, 1, 2), (3, 300007, 4)],
)
def test_tiled_config_is_valid_for_every_shape(m: int, n: int, itemsize: int) -> None:
    config = tiled.choose_config(m, n, itemsize, num_sms=132)
    for block in (config.BLOCK_M, config.BLOCK_N):
        assert block >= 1 and block & (block - 1) == 0
    assert config.BLOCK_N * itemsize <= tiled.MAX_ROW_BYTES
    assert config.BLOCK_M * config.BLOCK_N * itemsize <= max(tiled.TILE_BYTES, config.BLOCK_N * itemsize)
    assert 1 <= config.SPLIT <= tiled.MAX_SPLIT
    programs = -(-m // config.BLOCK_M) * config.SPLIT
    if m * n * itemsize >= 64 * 2**20:  # a large input must give every SM several programs
        assert programs >= tiled.PROGRAMS_PER_SM * 132


def test_every_plan_covers_each_row_once_in_whole_blocks() -> None:
    # 2000 random shapes, 16-bit and fp32, rows aligned or not: the column ranges a plan launches
    # start on block (and so vector) boundaries, cover the row (from its 16-byte boundary when
    # realigned) and leave no range empty; tiles stay within their byte budgets.
    import random

    rng = random.Random(20261130)
    for _ in range(2000):
        m, n = rng.choice((1, 2, 3, 7, 64, 999, 4096, 60000)), rng.randint(1, 300000)
        itemsize, ragged, sms = rng.choice((2, 4)), rng.random() < 0.5, rng.choice((78, 132))
        p = tiled.plan(m, n, itemsize, sms, (None,) * 5, ragged)
        c, vec = p.config, tiled.VECTOR_BYTES // itemsize
        span = n + vec - 1 if tiled.realigns(n, itemsize, c.BLOCK_N, ragged) else n
        assert p.cols_per_split % c.BLOCK_N == 0 and p.cols_per_split > 0
        assert p.split * p.cols_per_split >= span > (p.split - 1) * p.cols_per_split, (m, n, itemsize, ragged, p)
        assert p.grid == (-(-m // c.BLOCK_M), p.split) and (p.combine is None) == (p.split == 1)
        assert c.BLOCK_M * c.BLOCK_N * itemsize <= max(tiled.TILE_BYTES, c.BLOCK_N * itemsize)


def test_few_long_rows_are_split_and_many_rows_are_not() -> None:
    assert tiled.choose_config(32, 1048576, 4, 132).SPLIT > 1
    assert tiled.choose_config(65536, 1024, 4, 132).SPLIT == 1
    assert tiled.choose_config(1, 4097, 4, 132).SPLIT == 1  # too little work to be worth a second launch


@pytest.mark.parametrize(("m", "n", "itemsize"), [(61008, 1100, 2), (16384, 5000, 2), (4096, 9000, 2), (31956, 2100, 2)])
def test_rows_a_block_would_pad_by_over_a_quarter_take_narrower_steps(m: int, n: int, itemsize: int) -> None:
    config = tiled.choose_config(m, n, itemsize, num_sms=132)
    padded = -(-n // config.BLOCK_N) * config.BLOCK_N
    assert padded <= n * (1 + tiled.MAX_PADDING)
    assert config.BLOCK_N >= tiled.MIN_PADDED_BLOCK_N and config.NUM_STAGES > 1


@pytest.mark.parametrize(("m", "n", "itemsize"), [(1000, 1100, 2), (256, 4097, 2), (8000, 1100, 4), (61008, 1100, 4)])
def test_few_padded_rows_and_fp32_rows_keep_one_wide_step(m: int, n: int, itemsize: int) -> None:
    # Too few programs to share each narrower step across the SMs: steps one after another cost
    # more than the padding (H200: 1000 x 1500 bf16 6.2-6.8 us in one step, 8.1 in three). fp32
    # rows gained only above 250 MB and lost 6-9% below (8000 x 1100: 17.1 -> 18.6 us).
    config = tiled.choose_config(m, n, itemsize, num_sms=132)
    assert config.BLOCK_N >= min(checks.next_power_of_2(n), tiled.MAX_ROW_BYTES // itemsize)


def test_rows_read_element_by_element_are_read_in_whole_vectors() -> None:
    # The JIT specializes a row stride and a width that are multiples of 16 elements and an
    # aligned pointer; without them partial_sums_kernel reads rows one element at a time (2-byte
    # loads for bf16 at 58204 x 182, 0.4x torch.sum on an H200), unless the kernel reads each
    # row's whole vectors itself.
    def kernel(m: int, n: int, itemsize: int, ragged: bool, block_n: int | None = None) -> object:
        return tiled.plan(m, n, itemsize, 132, (None, block_n, None, None, None), ragged).partial.fn

    assert kernel(58204, 182, 2, True) is tiled.realigned_partial_sums_kernel
    assert kernel(16, 83884, 2, True) is tiled.realigned_partial_sums_kernel
    assert kernel(7, 101, 4, True) is tiled.realigned_partial_sums_kernel
    assert kernel(58204, 192, 2, False) is tiled.partial_sums_kernel  # aligned rows: the plain kernel
    assert kernel(1000, 9, 2, True) is tiled.partial_sums_kernel  # narrower than two vectors
    assert kernel(1000, 100, 2, True, block_n=4) is tiled.partial_sums_kernel  # blocks of part of a vector
    base = torch.zeros(4096)
    assert tiled.ragged_rows(base[: 7 * 33].view(7, 33))  # 132-byte rows
    assert tiled.ragged_rows(base[: 7 * 36].view(7, 36))  # rows on boundaries, a width no multiple of 16
    assert not tiled.ragged_rows(base[: 7 * 32].view(7, 32))
    assert not tiled.ragged_rows(base[1 : 1 + 7 * 33].view(7, 33))  # the tensor itself off a boundary
    assert not tiled.ragged_rows(base[: 33 * 7].view(33, 7).t())  # rows not contiguous


# Compiled in a fresh process without TRITON_INTERPRET: under `pytest --tkreg` this worker may run
# the interpreter, which turns the kernels into interpreter functions that cannot be compiled.
LOADS_RUN = r"""
import json, re, sys
from tkreg.launch.aot import compile_spec
from tkreg_reductions import tiled
found = {}
for dtype in ("bfloat16", "float32"):
    for label, config in json.loads(sys.argv[1]).items():
        for realigned in (0, 1):
            spec = tiled.aot_sum_row_tiled(None, dtype, {**config, "REALIGNED": realigned})
            if not realigned:  # as the JIT specializes the same rows: stride and width unaligned
                spec.aligned = tuple(a for a in spec.aligned if a not in ("N", "stride_m"))
            ptx = compile_spec(spec, "sm_90a").ptx
            found[f"{dtype}|{label}|{realigned}"] = re.findall(r"ld\.global[\w.:]*", ptx)
print(json.dumps(found))
"""
LOAD_CONFIGS = {
    "narrow rows": {"BLOCK_M": 32, "BLOCK_N": 256},
    "split long rows": {"BLOCK_M": 1, "BLOCK_N": 4096, "SPLIT": 2, "NUM_STAGES": 3},
}


@pytest.mark.skipif(cuobjdump_path() is None, reason="cuobjdump (shipped with triton) not found")
def test_the_realigned_kernel_loads_only_whole_vectors() -> None:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    run = subprocess.run([sys.executable, "-c", LOADS_RUN, json.dumps(LOAD_CONFIGS)], env=env, capture_output=True,
                         text=True, timeout=600)  # fmt: skip
    assert run.returncode == 0, run.stderr[-3000:]
    loads = json.loads(run.stdout.strip().splitlines()[-1])
    assert len(loads) == 2 * 2 * len(LOAD_CONFIGS)

    def element_wide(found: list[str]) -> list[str]:
        return [load for load in found if not re.search(r"\.v[24]\.", load)]

    for key, found in loads.items():
        if key.endswith("|1"):
            assert element_wide(found) == [], (key, found)
        else:  # the plain kernel on the same rows loads elements
            assert element_wide(found), (key, found)


def test_split_sums_are_deterministic(registry: tkreg.Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    if "TRITON_INTERPRET" not in __import__("os").environ:
        pytest.skip("needs the Triton interpreter active for the whole process (run with pytest --tkreg on a CPU machine)")
    x = torch.randn(3, 5003, generator=torch.Generator().manual_seed(3))
    launcher = registry.kernel("sum_row_tiled").load()
    first = launcher(x, BLOCK_M=2, BLOCK_N=64, SPLIT=7)
    again = launcher(x, BLOCK_M=2, BLOCK_N=64, SPLIT=7)
    assert torch.equal(first, again)
    torch.testing.assert_close(first.double(), x.double().sum(-1), atol=8 * 2**-24 * 5003, rtol=2 * 2**-24)


def test_ranking_reads_the_measured_table_of_the_device_at_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    narrow = torch.ones(10000, 32)
    value, why = ranking.score("sum_row_tiled", narrow, {"device": "NVIDIA H100 80GB HBM3", "gbps": {}})
    assert value == 0.0 and why == "no measurement on this machine (no GPU): the table is of NVIDIA H100 80GB HBM3"
    monkeypatch.setattr(ranking, "_device_name", lambda x: "NVIDIA H100 80GB HBM3")  # as on that GPU
    table = {
        "device": "NVIDIA H100 80GB HBM3",
        "date": "2026-11-22",
        "gbps": {"1048576x32": {"float32": {"sum_row_tiled": 2900.0, "sum_row": 800.0}, "bfloat16": {"sum_row_tiled": 2800.0}}},
    }
    value, why = ranking.score("sum_row_tiled", narrow, table)
    assert value == 2900.0 and "1048576x32 (narrow rows; NVIDIA H100 80GB HBM3, 2026-11-22)" in why
    assert ranking.score("sum_row", narrow, table)[0] == 800.0
    assert ranking.score("sum_row_tiled", narrow.half(), table)[0] == 2800.0  # fp16 reads like bf16
    value, why = ranking.score("sum_row_blocked", narrow, table)
    assert value == 0.0 and why.startswith("no measurement")


@pytest.mark.parametrize(
    ("m", "n", "cls"),
    [
        (1048576, 32, "narrow rows"),
        (65536, 1024, "medium rows"),
        (16384, 16384, "square"),
        (4096, 131072, "long rows"),
        (32, 1048576, "few long rows"),
    ],
)
def test_bench_shapes_are_their_own_class(m: int, n: int, cls: str) -> None:
    assert ranking.shape_class(m, n) == cls
    assert ranking.CLASSES[cls] == f"{m}x{n}"


def test_the_shipped_table_covers_every_bench_shape_and_kernel() -> None:
    table = ranking.measured()
    assert table["device"].startswith("NVIDIA") and table["date"] and table["command"]
    for shape in ranking.CLASSES.values():
        for dtype in ("float32", "bfloat16"):
            assert set(table["gbps"][shape][dtype]) == set(LAUNCHERS), (shape, dtype)


def test_lookup_with_inputs_ranks_by_measured_speed_and_says_why(
    registry: tkreg.Registry, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ranking, "_device_name", lambda x: ranking.measured()["device"])  # inputs on the measured GPU
    narrow = torch.empty(4096, 32, dtype=torch.bfloat16)
    verdicts = [v for v in registry.explain("sum_row", (9, 0), inputs=(narrow,)) if v.runs]
    scores = [v.score for v in verdicts]
    assert scores == sorted(scores, reverse=True)
    assert "measured at 1048576x32 (narrow rows" in verdicts[0].ranking
    assert verdicts[1].ranking.startswith(f"ranked below {verdicts[0].kernel.name}: ")


def test_fast_checks_never_accept_what_the_full_checks_refuse(monkeypatch: pytest.MonkeyPatch) -> None:
    """checks.plainly_valid is a sufficient condition for the full checks (pointed at the CPU
    here), over every (x, out) pair of good and bad candidates; and it does accept good ones."""
    from tkreg.launch import inputs

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(inputs, "FAST_DEVICE_TYPE", "cpu")
    xs = [torch.ones(3, 4), torch.ones(1, 4).half(), torch.ones(5, 2).bfloat16(), torch.ones(4, 3).t(), torch.ones(4),
          torch.ones(2, 3, 4), torch.ones(3, 4).double(), torch.ones(0, 4), torch.nn.Parameter(torch.ones(3, 4)), [[1.0]]]
    outs = [None, torch.ones(3), torch.ones(1).half(), torch.ones(5).bfloat16(), torch.ones(6)[::2], torch.ones(2)[:1],
            torch.ones(4), torch.ones(3, 1), torch.ones(3).double(), torch.zeros(3, dtype=torch.int32)]
    accepted = 0
    for x in xs:
        for out in outs:
            if checks.plainly_valid(x, out):
                accepted += 1
                with monkeypatch.context() as full:
                    full.setattr(checks, "plainly_valid", lambda *args: False)
                    checks.validate(x, out)  # raises if the full checks refuse
    assert accepted >= 8


def test_launch_plans_are_cached_per_shape_and_parameters() -> None:
    first = tiled.plan(32, 1 << 20, 2, 132, (None,) * 5)
    assert tiled.plan(32, 1 << 20, 2, 132, (None,) * 5) is first and first.split > 1 and first.combine is not None
    assert tiled.plan(32, 1 << 20, 2, 132, (2, None, None, None, None)) is not first
    with pytest.raises(ValueError, match=r"SPLIT must be in 1\.\.1024"):
        tiled.plan(32, 1 << 20, 2, 132, (None, None, 2000, None, None))
