"""The pytest plugin, exercised through pytester with the toy plugin as the run's conftest."""

from __future__ import annotations

from pathlib import Path

import pytest

# Imported here so pytester's in-process runs find them already loaded: its sys.modules snapshot
# would otherwise drop torch after the first run, and torch cannot be imported twice.
import torch  # noqa: F401
import triton  # noqa: F401

from tkreg.core.platform import current

pytest_plugins = ["pytester"]

# The toy runs are in-process: they see this machine's GPU, whatever the environment says.
without_a_gpu = pytest.mark.skipif(
    current().is_gpu, reason="asserts what a machine without a GPU reports (interpreted items, benchmarks skipped)"
)

TOY = (Path(__file__).parent / "fixtures" / "toy_plugin.py").read_text()


@pytest.fixture
def toy(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """A pytester directory whose conftest registers the toy plugin; installed plugins are off."""
    monkeypatch.setenv("TKREG_PLUGINS", "")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # this machine has no GPU; the plugin would set it too
    pytester.makeconftest(TOY)
    return pytester


def test_without_flag_nothing_is_generated_and_nothing_heavy_imported(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
import sys
def pytest_sessionfinish(session):
    print("HEAVY:", sorted(m for m in ("torch", "triton") if m in sys.modules))
"""
    )
    pytester.makepyfile(test_plain="def test_plain():\n    assert 1 + 1 == 2\n")
    result = pytester.runpytest_subprocess("-s")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*HEAVY: []*"])
    assert "tkreg/" not in result.stdout.str()


@without_a_gpu
def test_correct_kernel_items_pass_with_readable_ids(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_scale", "-m", "tkreg_correctness", "-v")
    # 2 configs x 2 dtypes x 3 cases
    result.assert_outcomes(passed=12)
    result.stdout.fnmatch_lines(
        [
            "*tkreg/toy_scale::toy_scale[[]fp16-17x33-BLOCK_M=16-BLOCK_N=16[]] PASSED*",
            "*tkreg/toy_scale::toy_scale[[]fp32-9x21-strided-BLOCK_M=4-BLOCK_N=8[]] PASSED*",
            "*correctness (no GPU: Triton interpreter): 12 passed*",
        ]
    )


@pytest.mark.parametrize(
    ("kernel", "expected"),
    [
        ("toy_off_by_one", ["*elements never written (still NaN poison*", "*at [[]0, 32[]]: got nan, expected*"]),
        ("toy_unwritten_tail", ["*elements never written*", "*at [[]16, 0[]]*"]),
        ("toy_wrong_stride", ["*mismatch*", "*max abs error*"]),
        ("toy_nan", ["*1 elements are inf or NaN where the reference is finite*", "*at [[]16, 0[]]*"]),
    ],
)
def test_broken_kernels_fail_with_actionable_messages(toy: pytest.Pytester, kernel: str, expected: list[str]) -> None:
    result = toy.runpytest("--tkreg", f"--tkreg-kernel={kernel}", "-m", "tkreg_correctness", "-k", "fp32-17x33 or strided")
    outcomes = result.parseoutcomes()
    assert outcomes.get("failed", 0) >= 1, result.stdout.str()
    result.stdout.fnmatch_lines([*expected, "*seed=*"])


def test_wrong_stride_only_fails_on_strided_input(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_wrong_stride", "-m", "tkreg_correctness", "-v")
    result.assert_outcomes(passed=4, failed=2)
    result.stdout.fnmatch_lines(["*::toy_wrong_stride[[]fp32-9x21-strided-BLOCK_M=16-BLOCK_N=16[]] FAILED*"])


@without_a_gpu
def test_unmet_requirements_skip_with_the_reason(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_hopper_only", "-rs")
    result.assert_outcomes(skipped=6)
    result.stdout.fnmatch_lines(
        ["*toy_hopper_only: needs a CUDA GPU (it cannot run under the Triton interpreter); this machine has none*"]
    )


def test_declared_input_constraints_require_a_clean_refusal(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_refuses,toy_claims_but_runs", "-m", "tkreg_correctness", "-v")
    # 3 cases x 2 dtypes each; the 5x1 case is the rejected one
    result.assert_outcomes(passed=10, failed=2)
    result.stdout.fnmatch_lines(
        [
            "*::toy_claims_but_runs[[]fp32-5x1[]] FAILED*",
            "*::toy_refuses[[]fp32-5x1[]] PASSED*",
            "*toy_claims_but_runs declares it cannot take these inputs (x has 1 column*did not raise tkreg.InputError*",
        ]
    )


def test_compile_items_check_the_generated_code(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "-m", "tkreg_compile", "-v")
    # toy_scale: 2 configs in fp32 + fp16 with the default config, for sm_80
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["*tkreg/toy_scale::toy_scale[[]compile-sm_80-fp32-BLOCK_M=4-BLOCK_N=8[]] PASSED*"])


def test_a_hung_kernel_fails_its_item_with_a_timeout(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_spin", "--tkreg-timeout=2", "-k", "fp32-5x1")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*toy_spin*did not finish within 2 s; its runner process*was killed and replaced*"])


def test_filters_and_markers_select_items(toy: pytest.Pytester) -> None:
    result = toy.runpytest("--tkreg", "--tkreg-op=toy_scale", "--co", "-q", "-m", "tkreg_compile")
    result.stdout.fnmatch_lines(["tkreg/toy_scale::toy_scale[[]compile-sm_80-*", "*3/* tests collected*"])


@pytest.mark.parametrize(
    ("option", "expected"),
    [
        ("--tkreg-op=toy_scael", "--tkreg-op: unknown op 'toy_scael' (did you mean 'toy_scale'?); known ops: toy_scale"),
        ("--tkreg-op=nonexistent,toy_scale", "--tkreg-op: unknown op 'nonexistent'; known ops: toy_scale"),
        ("--tkreg-kernel=toy_scale,toy_nann",
         "--tkreg-kernel: unknown kernel 'toy_nann' (did you mean 'toy_nan'?); known kernels: toy_claims_but_runs, "
         "toy_hopper_only, toy_nan, toy_off_by_one, toy_refuses, toy_scale, toy_spin, toy_unwritten_tail, toy_wrong_stride"),
        ("--tkreg-plugin=nope", "--tkreg-plugin: unknown plugin 'nope'; known plugins: conftest.py"),
    ],
)  # fmt: skip
def test_unknown_names_are_a_usage_error_naming_the_known_ones(toy: pytest.Pytester, option: str, expected: str) -> None:
    """Not "no items ran" after running every plain test: exit status 4 (pytest's usage error)
    before any item runs, with the known names and the closest one."""
    toy.makepyfile(test_plain="def test_plain():\n    assert True\n")
    result = toy.runpytest("--tkreg", option)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert f"ERROR: {expected}" in result.stderr.lines
    assert "passed" not in result.stdout.str() and "tkreg summary" not in result.stdout.str()


def test_unknown_names_are_a_usage_error_under_xdist_too(toy: pytest.Pytester) -> None:
    """pytest-xdist's controller collects nothing: the workers' error ends the run, exit status 4."""
    result = toy.runpytest_subprocess("--tkreg", "--tkreg-kernel=toy_scal", "-n", "2", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str()
    result.stderr.fnmatch_lines(["ERROR: --tkreg-kernel: unknown kernel 'toy_scal' (did you mean 'toy_scale'?)*"])


def test_an_unknown_tkreg_plugins_name_is_named_in_the_summary(toy: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKREG_PLUGINS", "elementwsie")
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_scale", "-m", "tkreg_compile")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(
        ["warning: TKREG_PLUGINS='elementwsie': unknown plugin 'elementwsie' (did you mean 'elementwise'?); installed plugins: *"]
    )


@without_a_gpu
def test_benchmark_outputs_that_nothing_fills_are_named(toy: pytest.Pytester) -> None:
    """On a CPU (or without --tkreg-bench) no benchmark runs: the summary says the files asked
    for were not written, instead of leaving them promised."""
    selection = ("--tkreg", "--tkreg-kernel=toy_scale", "-m", "tkreg_compile", "--tkreg-report=out")
    result = toy.runpytest(*selection, "--tkreg-bench-md=b.md")
    result.assert_outcomes(passed=3)
    result.stdout.fnmatch_lines(["no benchmarks ran (--tkreg-bench was not given): --tkreg-report, --tkreg-bench-md wrote*"])
    assert not (toy.path / "out").exists() and not (toy.path / "b.md").exists()
    bench = toy.runpytest(*selection, "--tkreg-bench")
    bench.stdout.fnmatch_lines(["no benchmarks ran (benchmarks need a CUDA GPU; this machine has none): --tkreg-report wrote*"])


def test_a_broken_plugin_fails_one_item_and_the_rest_still_run(toy: pytest.Pytester) -> None:
    toy.mkpydir("sub")
    toy.path.joinpath("sub", "conftest.py").write_text(
        "import tkreg\n@tkreg.hookimpl\ndef tkreg_register_kernels(register):\n    raise RuntimeError('boom in plugin')\n"
    )
    toy.path.joinpath("sub", "test_dummy.py").write_text("def test_dummy():\n    pass\n")
    result = toy.runpytest("--tkreg", "--tkreg-kernel=toy_scale", "-m", "tkreg_correctness or tkreg")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1, result.stdout.str()
    assert outcomes["passed"] >= 12
    result.stdout.fnmatch_lines(
        ["*tkreg plugin problem: sub/conftest.py (in-process): register kernels: RuntimeError: boom in plugin*"]
    )


@without_a_gpu
def test_benchmarks_skip_without_a_gpu(toy: pytest.Pytester) -> None:
    toy.makeconftest(TOY.replace("tkreg.case(M=5, N=1),", "tkreg.case(M=5, N=1), tkreg.case(sets=('bench',), M=64, N=64),"))
    result = toy.runpytest("--tkreg", "--tkreg-bench", "--tkreg-kernel=toy_scale", "-m", "tkreg_bench", "-rs")
    result.assert_outcomes(skipped=2)  # one bench case x two dtypes; the toy op has no peer
    result.stdout.fnmatch_lines(["*benchmarks need a CUDA GPU*"])


TOY_PEER = """

def toy_peer(x, out=None):
    y = x * 2
    return y if out is None else out.copy_(y)
"""


@pytest.mark.parametrize(("declared", "passes"), [("unchanged", True), ("lower", False)])
def test_an_autocast_declaration_is_held_against_the_peer(toy: pytest.Pytester, declared: str, passes: bool) -> None:
    """An op with a peer that declares what torch.autocast does to it gets an item per device type
    it declares, which runs the peer under autocast: a wrong declaration fails and names the right
    one; CUDA's item (declared right) skips on a machine without a GPU and passes on one."""
    declaration = f'tolerances=EXACT, peer=toy_peer, peer_name="2 * x", autocast={{"cpu": "{declared}", "cuda": "unchanged"}},'
    toy.makeconftest(TOY.replace("tolerances=EXACT,", declaration, 1) + TOY_PEER)
    result = toy.runpytest("--tkreg", "-m", "tkreg_autocast", "-v", "-rs")
    gpu = current().is_gpu
    result.assert_outcomes(passed=int(passes) + int(gpu), failed=int(not passes), skipped=int(not gpu))
    result.stdout.fnmatch_lines([f"*tkreg/toy_scale::autocast[[]cuda-bf16[]] {'PASSED' if gpu else 'SKIPPED'}*",
                                 "*autocast (each op's declaration against its peer): *"])  # fmt: skip
    if not passes:
        # float32 inputs, then the op's half dtype (float16: the toy op lists no bfloat16)
        result.stdout.fnmatch_lines(["op 'toy_scale' declares autocast 'lower' on cpu, but its peer 2 [*] x under *: float32 "
                                     "inputs: out is float32 (17, 33), the declared casts give bfloat16 (17, 33); float16 "
                                     "inputs: out is float16 (17, 33), the declared casts give bfloat16 (17, 33); the peer "
                                     "behaves as 'unchanged' does there: declare that"])  # fmt: skip


@pytest.mark.parametrize(("named", "outcome"),
                         [("torch.add, (0, 0)", "passed"), ("torch.neg, (0,)", "failed"), ("None", "skipped")])  # fmt: skip
def test_a_peer_direct_is_held_against_the_peer(toy: pytest.Pytester, named: str, outcome: str) -> None:
    """An op that names its peer's torch calls gets one item that makes them and the peer's own
    call on its default cases: a call that is not the peer's fails, naming the case and shapes;
    where no case's shapes name a call, the item skips and says so."""
    declaration = 'tolerances=EXACT, peer=toy_peer, peer_name="2 * x", peer_direct=toy_direct,'
    direct = f"\n\ndef toy_direct(shapes):\n    import torch\n    return {named}\n"
    toy.makeconftest(TOY.replace("tolerances=EXACT,", declaration, 1) + TOY_PEER + direct)
    result = toy.runpytest("--tkreg", "-m", "tkreg_direct", "-v", "-rs")
    result.assert_outcomes(**{outcome: 1})
    result.stdout.fnmatch_lines([f"*tkreg/toy_scale::peer_direct[[]default-cases[]] {outcome.upper()}*",
                                 "*direct (each op's named peer calls against its peer): *"])  # fmt: skip
    if outcome == "skipped":
        result.stdout.fnmatch_lines(["*op toy_scale's peer_direct names no call for its default cases' shapes*"])
    if outcome == "failed":
        result.stdout.fnmatch_lines(["op 'toy_scale': its peer_direct names a call that is not its peer's:",
                                     "  case 17x33, fp32, shapes [[](17, 33)[]]: output 0 against the peer's: 561 of 561 "
                                     "elements mismatch*"])  # fmt: skip
