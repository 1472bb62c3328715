"""add_triton under the CPU interpreter on what the generated items do not reach: bf16 ties
(rounded to even), sizes at the full-block/tail boundary, in-place adds, caller-given strided
outputs and the default (heuristic) config. The interpreter must be on before the kernel module
is imported, so the checks run in a fresh process that prints one line per failure."""

from __future__ import annotations

import os
import subprocess
import sys

from tkreg.testing.markers import runs_the_interpreter

CHECKS = r"""
import torch
from tkreg_elementwise.add_triton import LARGE_CONFIG, add_triton

failures, count = [], 0

def check(what, a, b, out=None, **params):
    global count
    count += 1
    want = (a.double() + b.double()).to(a.dtype)  # the correctly rounded sum
    got = add_triton(a, b, out=out, **params)
    if out is not None and got.data_ptr() != out.data_ptr():
        failures.append(f"{what}: did not write into out=")
    if not torch.equal(got, want):
        bad = (got != want).nonzero()[:3].tolist()
        failures.append(f"{what}: {int((got != want).sum())} mismatches, first at {bad}")

gen = torch.Generator().manual_seed(11)
# bf16 ties: a + b exactly halfway between two bf16 numbers must round to the even one.
one = torch.ones(4, 64, dtype=torch.bfloat16)
half_ulp = torch.full((4, 64), 2.0**-8, dtype=torch.bfloat16)  # 1 + 2**-8: between 1 and 1 + 2**-7
check("bf16 ties to even (down)", one, half_ulp)
check("bf16 ties to even (up)", one + 2.0**-7, half_ulp)  # 1 + 3 * 2**-8 rounds up to 1 + 2**-6
for dtype in (torch.float32, torch.float16, torch.bfloat16):
    block = LARGE_CONFIG["BLOCK"]
    for numel in (block - 1, block, block + 1, 2 * block + 7):
        a, b = (torch.randn(1, numel, generator=gen, dtype=dtype) for _ in range(2))
        check(f"{dtype} numel={numel}", a, b)
    a, b = (torch.randn(37, 41, generator=gen, dtype=dtype) for _ in range(2))
    check(f"{dtype} default config", a, b)
    check(f"{dtype} in place", a.clone(), b, out=None)
    a2 = a.clone()
    add_triton(a2, b, out=a2)
    count += 1
    if not torch.equal(a2, (a.double() + b.double()).to(dtype)):
        failures.append(f"{dtype} out=a: wrong in-place result")
    out = torch.empty(41, 37, dtype=dtype).t()  # a transposed output
    check(f"{dtype} transposed out", a, b, out=out, BLOCK=256, num_warps=2)
    wide = torch.randn(64, 100, generator=gen, dtype=dtype)
    check(f"{dtype} overlapping-free column slice", wide[:, 3:44], wide[:, 50:91], BLOCK=512, num_warps=4)
for line in failures:
    print(line)
print("checked", count)
"""


@runs_the_interpreter
def test_interpreter_edge_cases():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    run = subprocess.run([sys.executable, "-c", CHECKS], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.strip().splitlines()
    assert lines == ["checked 29"], run.stdout[-3000:]
