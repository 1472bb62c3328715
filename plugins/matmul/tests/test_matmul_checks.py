"""Input checks run before any launch: bad input raises InputError with a clear reason."""

from __future__ import annotations

import pytest
import torch
from tkreg_matmul.checks import gluon_matmul_inputs_reasons, operand_reasons, validate_gluon_matmul
from tkreg_matmul.triton_kernel import matmul_triton

from tkreg import InputError


def t(*shape, dtype=torch.float16):
    return torch.randn(shape).to(dtype)


@pytest.mark.parametrize(
    ("a", "b", "message"),
    [
        (t(4, 8, 2), t(8, 4), "a must be 2-D"),
        (t(4, 8), t(8, 4, dtype=torch.float32), "b has dtype float32"),
        (t(4, 8), t(8, 4, dtype=torch.bfloat16), "one dtype"),
        (t(4, 8), t(9, 4), "inner dimensions differ"),
        (t(0, 8), t(8, 4), "a is empty"),
    ],
)
def test_operand_reasons(a, b, message):
    reasons = operand_reasons(a, b)
    assert any(message in r for r in reasons), reasons
    with pytest.raises(InputError, match=message):
        validate_gluon_matmul(a, b)


def test_gluon_rejects_cpu_tensors():
    with pytest.raises(InputError, match="needs CUDA tensors"):
        validate_gluon_matmul(t(16, 16), t(16, 16))


def test_gluon_inputs_reasons_tma_rules():
    assert gluon_matmul_inputs_reasons(t(208, 304), t(304, 416)) == []
    odd = gluon_matmul_inputs_reasons(t(33, 33), t(33, 33))
    assert any("a: stride of dim 0 is 33" in r for r in odd), odd
    transposed = gluon_matmul_inputs_reasons(t(8, 16).t(), t(8, 16))
    assert any("last stride" in r for r in transposed), transposed
    assert gluon_matmul_inputs_reasons(t(16, 16), t(16, 16), t(16, 16)[:, 1:]) != []


def test_portable_launcher_checks_before_launch(monkeypatch):
    # CPU tensors without TRITON_INTERPRET: refused with the reason, nothing launched.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(InputError, match="TRITON_INTERPRET=1"):
        matmul_triton(t(8, 8), t(8, 8))
    with pytest.raises(InputError, match="inner dimensions differ"):
        matmul_triton(t(8, 8), t(9, 8))


def test_portable_launcher_checks_out(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # CPU tensors pass the device check; out must still fail
    with pytest.raises(InputError, match="out has shape"):
        matmul_triton(t(8, 8), t(8, 8), out=t(8, 9))
