"""The norms plugin's specs: it registers through its entry point like any plugin, its ops and
kernels are what the norms plugin promises, and its cases, plans and tolerances agree with each other."""

from __future__ import annotations

import inspect
import math
import subprocess
import sys
from importlib import metadata
from typing import Any

import pytest
from tkreg_norms import plans, plugin
from tkreg_norms import tolerances as tol

import tkreg
from tkreg.core import refs
from tkreg.core.loading import build_registry
from tkreg.core.tolerances import UNIT_ROUNDOFF

OPS = ("rms_norm", "layer_norm")
CHECKED = [c for op in (plugin.RMS_NORM, plugin.LAYER_NORM) for c in op.cases if "bench" not in c.sets]
ITEMSIZE = {"float32": 4, "float16": 2, "bfloat16": 2}
SMS = (None, 78, 132)  # the interpreter, a smaller GPU, an H100 SXM


@pytest.fixture(scope="module")
def registry() -> tkreg.Registry:
    return build_registry(env={"TKREG_PLUGINS": "norms"})


def test_registered_through_the_tkreg_entry_point() -> None:
    found = [ep for ep in metadata.entry_points(group="tkreg") if ep.name == "norms"]
    assert [ep.value for ep in found] == ["tkreg_norms.plugin"]
    assert found[0].dist is not None and found[0].dist.name == "tkreg-norms"


def test_the_registry_loads_both_ops_and_four_kernels(registry: tkreg.Registry) -> None:
    assert not registry.problems
    assert sorted(op.name for op in registry.ops()) == sorted(OPS)
    directions = {k.name: (k.op, k.direction) for op in OPS for k in registry.kernels(op)}
    assert directions == {
        "rms_norm_triton": ("rms_norm", "forward"),
        "rms_norm_bwd_triton": ("rms_norm", "backward"),
        "layer_norm_triton": ("layer_norm", "forward"),
        "layer_norm_bwd_triton": ("layer_norm", "backward"),
    }
    assert {registry.owner(registry.kernel(name)).name for name in directions} == {"norms"}


def test_plugin_module_imports_neither_torch_nor_triton() -> None:
    code = "import sys, tkreg_norms.plugin; print('torch' in sys.modules, 'triton' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert run.stdout.split() == ["False", "False"]


def test_the_ops_declare_inputs_parameters_outputs_and_gradients() -> None:
    rms, ln = plugin.RMS_NORM, plugin.LAYER_NORM
    assert rms.inputs == ("x", "weight") and ln.inputs == ("x", "weight", "bias")
    assert rms.grads == rms.inputs and ln.grads == ln.inputs
    # as torch's functions: nn.RMSNorm(d, elementwise_affine=False), nn.LayerNorm(d, bias=False)
    assert rms.optional == ("weight",) and ln.optional == ("weight", "bias")
    assert rms.param("eps").default == 1e-6 and ln.param("eps").default == 1e-5
    for op in (rms, ln):
        assert len(op.param("eps").values) >= 2
        assert op.dtypes == ("float32", "float16", "bfloat16")
        y, *stats = op.outputs
        assert (y.name, y.dtype, y.returned, y.differentiable) == ("y", None, True, True)
        assert all(s.dtype == "float32" and not s.returned and not s.differentiable for s in stats)
        assert op.contract.kind == "rows"
        assert set(op.rivals) == {"torch.compile"}
        assert op.bound == "memory" and op.backward_cost is not None
    assert [o.name for o in rms.outputs] == ["y", "rstd"]
    assert [o.name for o in ln.outputs] == ["y", "mean", "rstd"]
    assert (rms.peer_name, ln.peer_name) == ("F.rms_norm", "F.layer_norm")


def _shapes(op: tkreg.Op, *sets: str) -> set[tuple[int, int, str]]:
    return {(c["M"], c["N"], c.variant) for c in op.cases_in(*sets)}


@pytest.mark.parametrize("op", [plugin.RMS_NORM, plugin.LAYER_NORM], ids=OPS)
def test_cases_cover_odd_shapes_long_rows_strides_and_the_benchmarks(op: tkreg.Op) -> None:
    default = _shapes(op, "default")
    assert {(1, 1, ""), (3, 7, ""), (5, 1000, "")} <= default
    assert any(n > 65536 for _, n, _ in default)  # looped rows, under the interpreter too
    assert {"padded", "offset"} <= {v for _, _, v in default}
    bench = {(4096, 4096, ""), (16384, 8192, ""), (4096, 5120, ""), (4096, 8192, ""), (16384, 4096, ""),
             (16384, 5120, ""), (1, 4096, "")}
    assert _shapes(op, "bench") == bench | ({(4096, 4096, "no_bias")} if op is plugin.LAYER_NORM else set())
    for c in op.cases:  # the big correctness cases run on a GPU (and --tkreg-full), never by default
        assert c.sets in (("default", "full"), ("gpu", "full"), ("bench",))
    assert set(op.bench_dtypes) == set(op.dtypes)


@pytest.mark.parametrize(("op", "absent"), [(plugin.RMS_NORM, {"no_weight"}), (plugin.LAYER_NORM, {"no_bias", "no_affine"})],
                         ids=OPS)
def test_cases_leave_out_the_optional_inputs_under_the_interpreter_and_on_a_gpu(op: tkreg.Op, absent: set[str]) -> None:
    default, gpu = _shapes(op, "default"), _shapes(op, "gpu")
    for variant in absent:
        assert {(m, n) for m, n, v in default if v == variant} & {(3, 7), (5, 1000), (33, 100)}, variant
        assert variant in {v for _, _, v in gpu}, variant
    assert any(n > 8192 for _, n, v in default if v in absent)  # the looped backward
    assert len({c.id for c in op.cases}) == len(op.cases)


def test_default_cases_stay_small_enough_for_the_interpreter() -> None:
    # every default item interprets in about 2 s or less (2026-11-25, 2 cores); the largest row
    # count x width bounds the work per item
    assert max(c["M"] * c["N"] for op in (plugin.RMS_NORM, plugin.LAYER_NORM) for c in op.cases_in("default")) <= 140_000


def test_no_checked_case_has_more_rows_than_the_gradient_tolerance_assumes() -> None:
    assert max(c["M"] for c in CHECKED) <= tol.MAX_ROWS


def _plan_args(config: dict[str, Any]) -> dict[str, Any]:
    return {"block": config.get("BLOCK"), "rows": config.get("ROWS"), "num_warps": config.get("num_warps")}


def test_every_row_sum_of_every_plan_stays_within_the_tolerances_chain_length() -> None:
    """tolerances.SUM_DEPTH and ROW_CHAIN bound the fp32 addition chains the kernels run, for
    every checked case, dtype, test config and SM count."""
    for c in CHECKED:
        m, n = c["M"], c["N"]
        for itemsize in (4, 2):
            for config in plugin.FORWARD_CONFIGS:
                assert plans.sum_depth(n, plans.forward_plan(n, itemsize, **_plan_args(config))) <= tol.SUM_DEPTH, (c, config)
            for config in plugin.BACKWARD_CONFIGS:
                plan = plans.backward_plan(n, itemsize, **_plan_args(config))
                assert plans.sum_depth(n, plan) <= tol.SUM_DEPTH, (c, config)
                for sms in SMS:
                    chain = plans.gradient_chain(m, plan, sms, config.get("programs"), n)
                    assert chain <= tol.ROW_CHAIN, (c, config, sms)


def test_forward_plans_by_row_width() -> None:
    fwd = plans.forward_plan
    # narrow rows share a program: a 16 KB tile
    assert fwd(7, 4) == plans.Plan(False, 8, 64, 1)
    assert fwd(1000, 4) == plans.Plan(False, 1024, 4, 8)
    assert fwd(4096, 2) == plans.Plan(False, 4096, 2, 8)
    # wide rows: one per program, 8 to 16 warps
    assert fwd(4096, 4) == plans.Plan(False, 4096, 1, 8)
    assert fwd(5120, 2) == plans.Plan(False, 8192, 1, 8)
    assert fwd(8192, 4) == plans.Plan(False, 8192, 1, 16)
    assert fwd(16384, 4) == plans.Plan(False, 16384, 1, 16)
    # longer: looped in 16 KB chunks
    assert fwd(16385, 4) == plans.Plan(True, 4096, 1, 16)
    assert fwd(65537, 2) == plans.Plan(True, 8192, 1, 16)
    # a config's block makes shorter rows loop, and its rows and warps are taken as given
    assert fwd(1000, 4, block=256) == plans.Plan(True, 256, 1, 16)
    assert fwd(100, 4, block=256, rows=2, num_warps=2) == plans.Plan(False, 128, 2, 2)


def test_backward_plans_by_row_width() -> None:
    bwd = plans.backward_plan
    # 16-bit rows pipeline 3 deep, 4 where padded to their power of two; fp32 rows 2
    assert bwd(7, 2) == plans.Plan(False, 8, 64, 1, 4)
    assert bwd(100, 2) == plans.Plan(False, 128, 32, 8, 4)
    assert bwd(4096, 2) == plans.Plan(False, 4096, 1, 8, 3)
    assert bwd(5120, 2) == plans.Plan(False, 8192, 1, 16, 4)
    assert bwd(5120, 4) == plans.Plan(False, 8192, 1, 16, 2)
    assert bwd(8192, 4) == plans.Plan(False, 8192, 1, 16, 2)
    assert bwd(8193, 4) == plans.Plan(True, 4096, 1, 16)
    assert bwd(8193, 2) == plans.Plan(True, 8192, 1, 16)
    assert plans.programs_per_sm(8) == 2 and plans.programs_per_sm(16) == 1


@pytest.mark.parametrize("bad", [{"block": 100}, {"rows": 3}, {"num_warps": 3}, {"block": 0}, {"rows": True}])
def test_bad_configs_are_programming_errors(bad: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        plans.forward_plan(64, 4, **bad)
    with pytest.raises(ValueError):
        plans.backward_plan(64, 4, **bad)


@pytest.mark.parametrize("m", [1, 2, 3, 7, 64, 1000, 4099])
@pytest.mark.parametrize("rows", [1, 2, 64])
@pytest.mark.parametrize("programs", [None, 1, 3, 1000])
def test_backward_programs_cover_every_row_once(m: int, rows: int, programs: int | None) -> None:
    plan = plans.Plan(False, 128, rows, 8)
    for sms in SMS:
        count, per_program = plans.row_programs(m, plan, sms, programs)
        assert per_program % rows == 0
        assert (count - 1) * per_program < m <= count * per_program  # no empty program, no row left
        want = programs or (plans.INTERPRETER_PROGRAMS if sms is None else plans.programs_per_sm(8) * sms)
        assert count <= want


def test_the_partial_sums_are_spread_over_the_gpu() -> None:
    for n in (1, 7, 4096, 5120, 8192, 65537):
        block_p, block_c = plans.sum_plan(n, 132)
        assert block_c & (block_c - 1) == 0 and plans.SUM_MIN_COLUMNS <= block_c <= plans.SUM_MAX_COLUMNS
        assert block_p * block_c <= plans.SUM_TILE
    assert -(-4096 // plans.sum_plan(4096, 132)[1]) >= 128  # most of an H100's SMs


def test_tolerances_are_one_rounding_plus_the_fp32_arithmetic() -> None:
    u32 = UNIT_ROUNDOFF["float32"]
    for table in (tol.RMS_NORM, tol.LAYER_NORM, tol.GRADS):
        for dtype in ("float16", "bfloat16"):
            # one ulp of the output, plus the fp32 error: a few hundredths of an ulp more
            assert 2 * UNIT_ROUNDOFF[dtype] < table[dtype].rtol < 2.1 * UNIT_ROUNDOFF[dtype]
        assert table["float32"].rtol < 120 * u32
    assert tol.RMS_NORM["float32"].atol == 0 and tol.RSTD["float32"].atol == 0
    assert math.isclose(tol.SUM_REL, 6 * math.sqrt(1024) * u32)


def test_cost_models_count_the_bytes_each_op_moves() -> None:
    m, n, s = 4096, 4096, 2
    rms = refs.resolve(plugin.RMS_NORM.cost)({"M": m, "N": n}, s)
    assert rms.bytes == 2 * m * n * s + n * s + 4 * m
    ln_bwd = refs.resolve(plugin.LAYER_NORM.backward_cost)({"M": m, "N": n}, s)
    assert ln_bwd.bytes == 3 * m * n * s + 3 * n * s + 8 * m


@pytest.mark.parametrize("kernel", plugin.KERNELS, ids=lambda k: k.name)
def test_every_compile_config_names_every_argument_of_its_kernel(kernel: tkreg.Kernel) -> None:
    """What the compile items build is a launch the kernel takes (compiled by test_norms_compile)."""
    for config in kernel.compile_configs or ():
        for dtype in plugin.DTYPES:
            spec = refs.resolve(kernel.aot)(None, dtype, dict(config))
            fn = spec.fn
            while not inspect.isfunction(fn):
                fn = fn.fn
            assert list(spec.signature) == list(inspect.signature(fn).parameters), (config, dtype)
            assert set(spec.constexprs) <= set(spec.signature)
