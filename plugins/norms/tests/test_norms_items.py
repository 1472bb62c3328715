"""End to end as CI runs it: `TKREG_PLUGINS=norms pytest --tkreg --tkreg-op=rms_norm,layer_norm
-m tkreg_correctness` generates an item per kernel, config, dtype, default case and eps value,
forward and backward, and every one passes under the interpreter (about a minute on 2 cores)."""

from __future__ import annotations

import pytest
from tkreg_norms import plugin

from tkreg.testing.markers import runs_the_interpreter

pytest_plugins = ["pytester"]

PARAM_SETS = 2  # each op's default eps and one other value
# Items per kernel of each op, whose own cases (absent weight or bias among them) decide the count.
PER_KERNEL = {op.name: len(plugin.FORWARD_CONFIGS) * len(plugin.DTYPES) * len(op.cases_in("default")) * PARAM_SETS
              for op in (plugin.RMS_NORM, plugin.LAYER_NORM)}


@runs_the_interpreter
def test_every_interpreted_item_of_both_ops_passes(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TKREG_PLUGINS", "norms")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")  # the items of a machine without a GPU, wherever this runs
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the plugin turns it on where there is no GPU
    result = pytester.runpytest_subprocess(
        "--tkreg", "--tkreg-op=rms_norm,layer_norm", "-m", "tkreg_correctness", "-v", "-p", "no:cacheprovider", timeout=1200
    )
    assert len(plugin.BACKWARD_CONFIGS) == len(plugin.FORWARD_CONFIGS)
    result.assert_outcomes(passed=sum(PER_KERNEL[k.op] for k in plugin.KERNELS))
    result.stdout.fnmatch_lines_random([
        "*::rms_norm_triton[[]bf16-2x65537-eps=1e-06[]] PASSED*",
        "*::rms_norm_bwd_triton[[]fp16-9x300-offset-eps=0.1-BLOCK=256-ROWS=2-programs=8-num_warps=2[]] PASSED*",
        "*::layer_norm_triton[[]fp32-33x100-padded-eps=1e-05-BLOCK=256-ROWS=2-num_warps=2[]] PASSED*",
        "*::layer_norm_bwd_triton[[]bf16-1x1-eps=0.1[]] PASSED*",
        # absent inputs, forward and backward (looped at 8193 columns)
        "*::rms_norm_bwd_triton[[]bf16-2x8193-no_weight-eps=1e-06[]] PASSED*",
        "*::layer_norm_triton[[]fp16-5x1000-no_affine-eps=0.1-BLOCK=256-ROWS=2-num_warps=2[]] PASSED*",
        "*::layer_norm_bwd_triton[[]fp32-2x8193-no_bias-eps=1e-05[]] PASSED*",
        "*::layer_norm_bwd_triton[[]bf16-9x300-no_weight-eps=0.1-BLOCK=256-ROWS=2-programs=8-num_warps=2[]] PASSED*",
    ])
