"""Every sum_row kernel against the float64 reference under the Triton interpreter, on odd shapes
and layouts the generated items do not use, and the split path's determinism.

TRITON_INTERPRET must be set before a kernel module is imported, and this process may already
have imported them without it, so the kernels run in one child process (started once per module)
that reports each check as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch
from tkreg_reductions import checks

import tkreg
from tkreg.core.loading import build_registry
from tkreg.testing.markers import runs_the_interpreter

# (M, N, variant): single column, prime sizes around block sizes, a sliced and a transposed view.
# 9 x 1119: rows off 16-byte boundaries, their leads reaching past the last split range at EXTRA_CONFIGS's SPLIT.
SHAPES = ((3, 70, ""), (67, 1, ""), (5, 130, "colslice"), (67, 9, "transposed"), (2, 2049, "transposed"), (9, 1119, ""))
DTYPES = ("float32", "bfloat16")
# Configs beyond each kernel's own choice, so every code path (split, ragged tails) runs.
EXTRA_CONFIGS = {
    "sum_row_blocked": [{"BLOCK_M": 8}],
    "sum_row_blocked_iterative": [{"BLOCK_N": 32}],
    "sum_row_tiled": [{"BLOCK_M": 2, "BLOCK_N": 32, "SPLIT": 5}],
}
KERNELS = ("sum_row", "sum_row_blocked", "sum_row_blocked_iterative", "sum_row_tiled")

CHILD = r"""
import json, sys
import torch
from tkreg import case
from tkreg.testing.harness import run_check
from tkreg.core.loading import build_registry

shapes, dtypes, extra = json.loads(sys.argv[1])
reg = build_registry()
results = {}
for kernel in reg.kernels("sum_row"):
    for config in [{}] + extra.get(kernel.name, []):
        for m, n, variant in shapes:
            for dtype in dtypes:
                key = f"{kernel.name}|{json.dumps(config, sort_keys=True)}|{m}x{n}-{variant}|{dtype}"
                try:
                    check = run_check(reg, kernel, case(M=m, N=n, variant=variant), dtype, config, seed=7, device="cpu")
                    results[key] = {"ok": check.comparison.ok, "report": check.comparison.report(check.context)}
                except Exception as e:
                    results[key] = {"ok": False, "report": f"raised {type(e).__name__}: {e}"}

# Determinism of the split path: continuous data (no exact sums), two runs, bit for bit.
tiled = reg.kernel("sum_row_tiled").load()
x = torch.randn(3, 5003, generator=torch.Generator().manual_seed(3))
split = dict(BLOCK_M=2, BLOCK_N=64, SPLIT=7)
first, again = tiled(x, **split), tiled(x, **split)
results["determinism"] = {
    "equal": bool(torch.equal(first, again)),
    "max_err": float((first.double() - x.double().sum(-1)).abs().max()),
}

# Rows inside NaN: every element outside the rows (row padding, before and after the tensor) is
# NaN, so a kernel that adds anything beyond a row's own elements returns NaN. Rows off 16-byte
# boundaries, read in whole vectors that reach into the neighbours' elements.
leaks = []
for dtype in (torch.float32, torch.bfloat16):
    for m, n, pad, before in ((7, 45, 3, 0), (5, 203, 1, 8), (3, 1003, 5, 0), (9, 70, 0, 16)):
        for config in ({}, dict(BLOCK_M=2, BLOCK_N=32, SPLIT=5)):
            base = torch.full((before + m * (n + pad) + 16,), float("nan"), dtype=dtype)
            x = base[before : before + m * (n + pad)].view(m, n + pad)[:, :n]
            x.copy_(torch.randn(m, n, generator=torch.Generator().manual_seed(m * n), dtype=dtype))
            got = tiled(x, **config).double()
            if not torch.isfinite(got).all() or (got - x.double().sum(-1)).abs().max() > 0.05 * n ** 0.5:
                leaks.append(f"{dtype} {m}x{n} pad {pad} before {before} {config}: {got.tolist()[:3]}")
results["neighbours"] = leaks
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def child_results() -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "TKREG_PLUGINS": "reductions"}
    arg = json.dumps([SHAPES, DTYPES, EXTRA_CONFIGS])
    done = subprocess.run([sys.executable, "-c", CHILD, arg], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cases() -> list[tuple[str, str]]:
    keys = []
    for kernel in KERNELS:
        for config in [{}, *EXTRA_CONFIGS.get(kernel, [])]:
            for m, n, variant in SHAPES:
                for dtype in DTYPES:
                    keys.append((kernel, f"{kernel}|{json.dumps(config, sort_keys=True)}|{m}x{n}-{variant}|{dtype}"))
    return keys


@runs_the_interpreter
@pytest.mark.parametrize(("kernel", "key"), _cases(), ids=[k for _, k in _cases()])
def test_kernel_matches_the_reference_under_the_interpreter(child_results: dict[str, dict], kernel: str, key: str) -> None:
    checked = sorted({k.split("|")[0] for k in child_results})
    assert key in child_results, f"{kernel} was not checked (kernels the child found: {checked})"
    assert child_results[key]["ok"], child_results[key]["report"]


@runs_the_interpreter
def test_split_path_is_bit_reproducible(child_results: dict[str, dict]) -> None:
    result = child_results["determinism"]
    assert result["equal"], "two runs of the split path gave different bits"
    # fp32 sums of 5003 standard normals: a wrong or missing range would be off by O(1).
    assert result["max_err"] < 1e-3


@runs_the_interpreter
def test_the_tiled_sum_adds_nothing_beyond_each_row(child_results: dict[str, dict]) -> None:
    assert child_results["neighbours"] == []


def test_block_limit_is_tritons() -> None:
    from triton.language.core import TRITON_MAX_TENSOR_NUMEL

    assert checks.MAX_BLOCK_ELEMENTS == TRITON_MAX_TENSOR_NUMEL


@pytest.mark.parametrize("name", KERNELS)
def test_a_strided_out_is_refused(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check; nothing launches
    launcher = build_registry(env={"TKREG_PLUGINS": "reductions"}).kernel(name).load()
    with pytest.raises(tkreg.InputError, match=r"out must be contiguous \(stride 1\); got stride 2"):
        launcher(torch.ones(3, 5), out=torch.empty(6)[::2])
    with pytest.raises(tkreg.InputError, match="out must be 1-D"):
        launcher(torch.ones(3, 5), out=torch.empty(3, 1))
