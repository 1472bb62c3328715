"""matmul_triton_batched on the CPU: its input checks, and its products under the Triton interpreter
against float64 (in a fresh process: the interpreter is switched on before triton is imported).
The generated items (pytest --tkreg) check it on the op's batched cases too."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from tkreg_matmul.checks import MAX_BATCHES, batched_operand_reasons, matrix_inputs_reasons
from tkreg_matmul.triton_kernel import alignment

from tkreg.testing.markers import runs_the_interpreter

torch = pytest.importorskip("torch")


def test_batched_inputs_are_checked_before_any_launch() -> None:
    a, b = torch.empty(3, 5, 8, dtype=torch.float16), torch.empty(3, 8, 4, dtype=torch.float16)
    assert batched_operand_reasons(a, b) == []
    assert batched_operand_reasons(a[0], b[0]) == ["a must be 3-D, got shape (5, 8)", "b must be 3-D, got shape (8, 4)"]
    assert "need a (Bt, M, K) and b (Bt, K, N)" in batched_operand_reasons(a, b[:2])[0]
    assert "need a (Bt, M, K) and b (Bt, K, N)" in batched_operand_reasons(a, b.transpose(1, 2))[0]
    assert "one dtype" in batched_operand_reasons(a, b.bfloat16())[0]
    assert "float32" in batched_operand_reasons(a.float(), b.float())[0]
    many = torch.empty(MAX_BATCHES + 1, 1, 8, dtype=torch.float16).expand(MAX_BATCHES + 1, 2, 8)
    assert f"at most {MAX_BATCHES}" in batched_operand_reasons(many, b[:1].expand(MAX_BATCHES + 1, 8, 4))[0]
    # the 2-D kernel declares it takes one product only
    assert matrix_inputs_reasons(a, b) and not matrix_inputs_reasons(a[0], b[0])


def test_16_byte_loads_only_where_every_batch_starts_aligned() -> None:
    a, b, out = torch.empty(2, 16, 64), torch.empty(2, 64, 32), torch.empty(2, 16, 32)
    assert alignment(a, b, out, "kn") == 8
    odd = torch.empty(2, 16 * 64 + 4)[:, : 16 * 64].view(2, 16, 64)  # a batch stride of 1028 elements
    assert alignment(odd, b, out, "kn") == 1
    assert alignment(a, b, out, None) == 1


RUN = """
import torch
from tkreg_matmul.batched import matmul_triton_batched
from tkreg_matmul.configs import SMALL
g = torch.Generator().manual_seed(3)
def randn(*shape, dtype):
    return torch.randn(shape, generator=g).to(dtype)
failures = 0
for dtype in (torch.float16, torch.bfloat16):
    cases = [
        (randn(3, 33, 24, dtype=dtype), randn(3, 24, 40, dtype=dtype)),               # odd sizes
        (randn(2, 17, 40, dtype=dtype), randn(2, 24, 40, dtype=dtype).transpose(1, 2)),  # batches of weights
        (randn(4, 1, 72, dtype=dtype), randn(4, 72, 8, dtype=dtype)),                 # one row per batch
        (randn(2, 20, 50, dtype=dtype)[:, :, 3:35], randn(2, 32, 16, dtype=dtype)),    # strided A
    ]
    for a, b in cases:
        want = a.double() @ b.double()
        for config in ({}, SMALL):
            out = torch.full((a.shape[0], a.shape[1], b.shape[2]), float("nan"), dtype=dtype)
            got = matmul_triton_batched(a, b, out=out, **config)
            new = matmul_triton_batched(a, b, **config)
            k = a.shape[2]
            bound = 8 * 2 ** -24 * (2 / 3.14159) * k ** 1.5 + 2 * (2 ** -10 if dtype == torch.float16 else 2 ** -7) * want.abs()
            for result in (got, new):
                if result.shape != want.shape or not ((result.double() - want).abs() <= bound).all():
                    failures += 1
                    print("wrong", tuple(a.shape), tuple(b.shape), dtype, config)
            if got is not out:
                failures += 1
                print("did not write into out")
print("failures", failures)
"""


@runs_the_interpreter
def test_products_under_the_interpreter_match_float64() -> None:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().splitlines()[-1] == "failures 0", done.stdout
