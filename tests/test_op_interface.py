"""Ops beyond float tensors in and one out, end to end through `pytest --tkreg` as a plugin author
runs it: a third-party cross-entropy (tests/fixtures/xent_plugin.py) with float logits, int64
targets, two parameters, two float32 outputs and a backward kernel, all interpreted."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

XENT_PLUGIN = (Path(__file__).parent / "fixtures" / "xent_plugin.py").read_text()
CASES, DTYPES = 4, 2
PARAM_SETS = 3  # the defaults, ignore_index=0, label_smoothing=0.1
PER_KERNEL = CASES * DTYPES * PARAM_SETS


@pytest.fixture
def xent(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    monkeypatch.setenv("TKREG_PLUGINS", "")  # the fixture plugin alone
    pytester.makeconftest(XENT_PLUGIN)
    return pytester


def run(pytester: pytest.Pytester, kernels: str, *extra: str) -> pytest.RunResult:
    # -rN: no short summary, which under CI=true repeats each failure's whole message (counted below)
    return pytester.runpytest_subprocess("--tkreg", f"--tkreg-kernel={kernels}", "-m", "tkreg_correctness", "-v", "-rN", *extra)


def test_every_interpreted_item_of_an_op_with_integer_inputs_parameters_and_two_outputs_passes(xent: pytest.Pytester) -> None:
    result = run(xent, "xent_triton,xent_bwd_triton,xent_writes_grad")
    result.assert_outcomes(passed=3 * PER_KERNEL)
    # ids show the parameter values; a backward kernel's items check its gradients
    result.stdout.fnmatch_lines_random([
        "*::xent_triton[[]bf16-9x300-ignore_index=-100-label_smoothing=0.0[]] PASSED*",
        "*::xent_triton[[]fp32-4x70-padded-ignore_index=0-label_smoothing=0.0[]] PASSED*",
        "*::xent_bwd_triton[[]bf16-5x7-ignore_index=-100-label_smoothing=0.1[]] PASSED*",
    ])


def test_a_kernel_that_overwrites_an_input_it_does_not_declare_fails_each_item_naming_it(xent: pytest.Pytester) -> None:
    result = run(xent, "xent_overwrites")
    result.assert_outcomes(failed=PER_KERNEL)
    failures = re.findall(r"changed an input it does not declare in writes=: (\d+) of (\d+) elements of input 'logits'",
                          result.stdout.str())
    assert len(failures) == PER_KERNEL
    assert all(changed == total for changed, total in failures)  # it zeroed every element


def test_a_planted_wrong_gradient_fails(xent: pytest.Pytester) -> None:
    """xent_bwd_wrong ignores the upstream gradient. At 1x1 every gradient is 0 either way (one
    class: its probability is 1), so only those items pass."""
    result = run(xent, "xent_bwd_wrong")
    one_by_one = DTYPES * PARAM_SETS
    result.assert_outcomes(failed=PER_KERNEL - one_by_one, passed=one_by_one)
    assert result.stdout.str().count("gradient of 'logits':") == PER_KERNEL - one_by_one
    result.stdout.fnmatch_lines(["*elements mismatch*"])
