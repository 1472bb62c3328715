"""Input checks run before any launch: bad input raises InputError with a clear reason."""

from __future__ import annotations

import pytest
import torch
from tkreg_matmul.checks import (
    bias_reasons,
    gluon_matmul_inputs_reasons,
    gluon_operand_reasons,
    matrix_inputs_reasons,
    operand_reasons,
    validate_gluon_matmul,
)
from tkreg_matmul.layouts import TransposedView, b_layout, b_tma_reasons
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
    # extra tensors (an output) are held to TMA's rules too
    assert gluon_operand_reasons(t(16, 16), t(16, 16), t(16, 16)) == []
    assert gluon_operand_reasons(t(16, 16), t(16, 16), t(16, 16)[:, 1:]) != []


def test_kernels_without_a_bias_epilogue_refuse_a_bias():
    assert gluon_matmul_inputs_reasons(t(16, 16), t(16, 16), None) == []
    refused = ["bias: this kernel has no bias epilogue (it takes bias=None only)"]
    assert gluon_matmul_inputs_reasons(t(16, 16), t(16, 16), t(16)) == refused


@pytest.mark.parametrize(
    ("bias", "message"),
    [
        (t(4, 6), "bias must be 1-D"),
        (t(5), "bias has 5 elements; it must have N=6"),
        (t(6, dtype=torch.bfloat16), "bias must have a's dtype"),
        (t(6, dtype=torch.float32), "bias has dtype float32"),
        (t(12)[::2], "bias must be contiguous, got stride 2"),
        (t(0), "bias is empty"),
        ([1.0] * 6, "bias must be a torch.Tensor, got list"),
    ],
)
def test_bias_reasons(bias, message):
    a, b = t(4, 8), t(8, 6)
    reasons = bias_reasons(a, b, bias)
    assert any(message in r for r in reasons), reasons
    assert matrix_inputs_reasons(a, b, bias) == reasons
    with pytest.raises(InputError, match=message):
        matmul_triton(a, b, bias)


def test_bias_reasons_take_none_and_a_vector():
    a, b = t(4, 8), t(8, 6)
    assert bias_reasons(a, b, None) == [] and bias_reasons(a, b, t(6)) == []
    assert bias_reasons(a, t(1, 1), t(1)) == []  # a one-element bias has any stride


def test_gluon_inputs_take_a_weight_as_stored():
    """x @ W.t() with W a row-major (N, K) weight: B's first stride is 1 and W's rows are TMA-legal."""
    assert gluon_matmul_inputs_reasons(t(16, 64), t(48, 64).t()) == []
    # W with padded rows (a column window of a wider buffer) is still legal.
    assert gluon_matmul_inputs_reasons(t(16, 64), t(48, 80)[:, 8:72].t()) == []
    # W with rows 72 bytes apart is not; the reason names B's view of it.
    reasons = gluon_matmul_inputs_reasons(t(16, 32), t(48, 36)[:, :32].t())
    assert reasons == [
        "b.t() (B read as the transpose of an (N, K) weight): stride of dim 0 is 36 elements (72 bytes), "
        "not a multiple of 16 bytes; TMA needs it"
    ]
    # Neither dimension contiguous.
    assert "no dimension has stride 1" in gluon_matmul_inputs_reasons(t(16, 32), t(32, 96)[:, ::2])[0]


@pytest.mark.parametrize(("b", "layout"), [(t(32, 48), "kn"), (t(48, 32).t(), "nk"), (t(32, 96)[:, ::2], None), (t(1, 8), "kn")])
def test_b_layout(b, layout):
    assert b_layout(b) == layout
    assert b_tma_reasons(b)[0] == layout


def test_transposed_view_metadata_without_the_tensor():
    w = t(48, 80)[:, 8:72]
    view = TransposedView(w.t())
    assert view.shape == tuple(w.shape) and view.stride() == w.stride() and view.stride(0) == 80
    assert view.data_ptr() == w.data_ptr() and view.element_size() == 2 and view.dim() == 2


@pytest.mark.parametrize("capability", [(9, 0), (10, 0)])
def test_explain_accepts_a_weight_for_the_tma_kernel_of_each_capability(capability):
    """The issue's acceptance: CPU tensors x and W.t() on a hypothetical 9.0 / 10.0 device."""
    import tkreg

    x, w = t(64, 4096, dtype=torch.bfloat16), t(1024, 4096, dtype=torch.bfloat16)
    verdicts = {v.kernel.name: v for v in tkreg.explain("matmul", capability, inputs=(x, w.t()))}
    expected = "matmul_hopper_ws" if capability == (9, 0) else "matmul_blackwell_ws"
    assert verdicts[expected].runs, verdicts[expected].reasons
    assert tkreg.lookup("matmul", capability, inputs=(x, w.t()))[0].name == expected
    # A weight with unaligned rows is refused with the reason; the portable kernel still takes it.
    odd = t(1024, 4100, dtype=torch.bfloat16)[:, :4096]
    verdicts = {v.kernel.name: v for v in tkreg.explain("matmul", capability, inputs=(x, odd.t()))}
    assert not verdicts[expected].runs and "b.t()" in verdicts[expected].reasons[0]
    assert verdicts["matmul_triton"].runs


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
