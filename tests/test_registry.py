"""Registry behaviour with well-behaved, broken, duplicate and invalid in-process plugins."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

import tkreg
from tests.helpers import Plugin, kernel, op, registry_of
from tkreg.core.loading import build_registry, selected_names


def test_kernels_register_and_lookup_by_capability() -> None:
    reg = registry_of(
        base=Plugin(ops=(op(),), kernels=(kernel("vec_any"), kernel("vec_hopper", requires=tkreg.Requirements(arch="sm_90a"))))
    )
    assert [k.name for k in reg.lookup("vec", (9, 0))] == ["vec_any", "vec_hopper"]
    assert [k.name for k in reg.lookup("vec", (8, 0))] == ["vec_any"]
    assert reg.owner(reg.kernel("vec_any")).name == "base"
    assert not reg.problems


def test_a_plugin_that_raises_is_reported_and_the_others_load() -> None:
    reg = registry_of(
        good=Plugin(ops=(op(),), kernels=(kernel("vec_a"),)), bad=Plugin(kernels=(kernel("vec_b"),), fail="kernels")
    )
    assert [k.name for k in reg.kernels()] == ["vec_a"]
    (problem,) = reg.problems
    assert problem.plugin.name == "bad"
    assert "register kernels" in problem.stage
    assert "RuntimeError: plugin bug while registering kernels" in problem.error


def test_an_invalid_spec_names_the_plugin_and_the_field() -> None:
    def bad_kernel() -> tkreg.Kernel:
        return kernel("vec_bad", requires=tkreg.Requirements(arch="sm_99z"))

    reg = registry_of(base=Plugin(ops=(op(),), kernels=(kernel("vec_ok"), bad_kernel)))
    assert [k.name for k in reg.kernels()] == ["vec_ok"]
    (problem,) = reg.problems
    text = problem.describe()
    assert "base (in-process)" in text
    assert "'requires.arch'" in text and "sm_99z" in text and "sm_90a" in text


def test_a_full_peer_without_a_peer_is_refused_naming_the_field() -> None:
    with pytest.raises(tkreg.SpecError) as info:
        dataclasses.replace(op(), full_peer="tests.helpers:cost")
    assert info.value.field == "full_peer" and "give the op a peer too" in str(info.value)
    assert dataclasses.replace(op(), peer="tests.helpers:cost", full_peer="tests.helpers:cost").full_peer == "tests.helpers:cost"


def test_duplicate_kernel_names_both_plugins() -> None:
    reg = registry_of(first=Plugin(ops=(op(),), kernels=(kernel("vec_x"),)), second=Plugin(kernels=(kernel("vec_x"),)))
    assert len(reg.kernels()) == 1
    (problem,) = reg.problems
    assert "registered twice" in problem.error
    assert "first (in-process)" in problem.error and "second (in-process)" in problem.error


def test_kernel_for_an_op_nobody_defines() -> None:
    reg = registry_of(base=Plugin(ops=(op(),), kernels=(kernel("orphan", op_name="conv"),)))
    (problem,) = reg.problems
    assert "computes op 'conv', which no loaded plugin defines (defined ops: vec)" in problem.error


def test_unknown_names_list_the_known_ones() -> None:
    reg = registry_of(base=Plugin(ops=(op(), op("other")), kernels=(kernel("vec_a"),)))
    with pytest.raises(tkreg.UnknownNameError, match=r"unknown op 'nope'; known ops: other, vec"):
        reg.lookup("nope", (9, 0))
    with pytest.raises(tkreg.UnknownNameError, match=r"known kernels: vec_a"):
        reg.kernel("vec_b")


def test_kernel_dtypes_must_be_the_ops() -> None:
    reg = registry_of(base=Plugin(ops=(op(),), kernels=(kernel("vec_bf16", requires=tkreg.Requirements(dtypes=("bfloat16",))),)))
    (problem,) = reg.problems
    assert "'requires.dtypes': bfloat16 not among op 'vec'" in problem.error


def test_explain_orders_by_priority_and_gives_reasons() -> None:
    reg = registry_of(
        base=Plugin(
            ops=(op(),),
            kernels=(
                kernel("vec_portable", interpretable=True),
                kernel("vec_fast", priority=10, requires=tkreg.Requirements(min_capability=(9, 0), features=("tma",))),
                kernel("vec_blackwell", priority=20, requires=tkreg.Requirements(arch="sm_100a", features=("tcgen05",))),
            ),
        )
    )
    verdicts = reg.explain("vec", (9, 0))
    assert [(v.kernel.name, v.runs) for v in verdicts] == [("vec_fast", True), ("vec_portable", True), ("vec_blackwell", False)]
    assert verdicts[1].ranking == "ranked below vec_fast: priority 0 < 10"
    assert verdicts[2].reasons == ("needs sm_100a (capability 10.0..10.3) for tcgen05; this device is 9.0",)
    at_80 = {v.kernel.name: v.reasons for v in reg.explain("vec", "8.0")}
    assert at_80["vec_fast"] == ("needs capability >= 9.0 for tma; this device is 8.0",)
    interp = {v.kernel.name: v.reasons for v in reg.explain("vec", "interpreter")}
    assert interp["vec_portable"] == ()
    assert interp["vec_fast"] == ("needs a CUDA GPU (it cannot run under the Triton interpreter); this machine has none",)


def test_a_kernel_that_takes_a_scheduler_runs_only_where_a_plugin_registers_one() -> None:
    # matmul_hopper_ws without the schedulers plugin failed at its first call ("unknown scheduler
    # 'grouped-8'") while explain listed it as runnable.
    without = build_registry(env={"TKREG_PLUGINS": "matmul,hopper_matmul"})
    verdicts = {v.kernel.name: v for v in without.explain("matmul", "9.0")}
    assert verdicts["matmul_hopper_ws"].reasons == ("takes a tile scheduler and no installed plugin registers one",)
    assert verdicts["matmul_triton"].runs
    with_schedulers = build_registry(env={"TKREG_PLUGINS": "matmul,hopper_matmul,schedulers"})
    assert "matmul_hopper_ws" in [k.name for k in with_schedulers.lookup("matmul", "9.0")]


def test_lookup_with_inputs_drops_kernels_that_cannot_take_them() -> None:
    torch = pytest.importorskip("torch")
    reg = registry_of(
        base=Plugin(
            ops=(op(),),
            kernels=(
                kernel("vec_portable"),
                kernel(
                    "vec_tma",
                    priority=10,
                    requires=tkreg.Requirements(min_capability=(9, 0), inputs="tkreg.launch.inputs:tma_inputs_reasons"),
                ),
            ),
        )
    )
    aligned = torch.empty(4, 8)
    assert [k.name for k in reg.lookup("vec", (9, 0), inputs=(aligned,))] == ["vec_tma", "vec_portable"]
    odd_rows = torch.empty(4, 9)[:, :7]  # row stride 9 floats = 36 bytes
    verdicts = {v.kernel.name: v for v in reg.explain("vec", (9, 0), inputs=(odd_rows,))}
    assert verdicts["vec_portable"].runs
    assert verdicts["vec_tma"].reasons == (
        "input 0: stride of dim 0 is 9 elements (36 bytes), not a multiple of 16 bytes; TMA needs it",
    )
    wrong_dtype = torch.empty(4, 8, dtype=torch.float64)
    assert reg.lookup("vec", (9, 0), inputs=(wrong_dtype,)) == []
    assert (
        "input 0 is float64; vec_portable takes float32, float16" in reg.explain("vec", (9, 0), inputs=(wrong_dtype,))[0].reasons
    )


def test_plugin_selection_from_the_environment() -> None:
    assert selected_names({}) is None
    assert selected_names({"TKREG_PLUGINS": ""}) == set()
    assert selected_names({"TKREG_PLUGINS": "a, b,"}) == {"a", "b"}
    assert build_registry(env={"TKREG_PLUGINS": ""}).plugins == []


def test_registering_something_that_is_not_a_spec_is_reported() -> None:
    reg = registry_of(base=Plugin(ops=(op(),), kernels=("not a kernel",)))
    (problem,) = reg.problems
    assert "expected a Kernel, got str" in problem.error


def test_tkreg_and_tkreg_ops_import_light_and_building_the_ops_imports_torch() -> None:
    code = (
        "import sys, tkreg; heavy = lambda: sorted(m for m in ('torch', 'triton') if m in sys.modules); "
        "tkreg.lookup('add', '9.0'); import tkreg.ops; print(heavy()); tkreg.ops.names(); print(heavy())"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    before, after = result.stdout.strip().splitlines()[-2:]
    assert before == "[]" and "torch" in after


def test_cached_rankings_are_forgotten_when_specs_or_rankers_change() -> None:
    reg = registry_of(base=Plugin(ops=(op(),), kernels=(kernel("vec_a"),)))
    first = reg.ranking("vec", (9, 0))
    assert reg.ranking("vec", (9, 0)) is first  # cached
    reg.add_ranker(lambda *args: None)
    assert reg.ranking("vec", (9, 0)) is not first
    again = reg.ranking("vec", (9, 0))
    reg.add(kernel("vec_b"), reg.plugins[0])
    assert [k.name for k in reg.ranking("vec", (9, 0)).runnable] == ["vec_a", "vec_b"] and reg.ranking("vec", (9, 0)) is not again
