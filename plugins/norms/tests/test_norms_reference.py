"""The ops' contracts in torch, no Triton: the float64 references against torch's F.rms_norm and
F.layer_norm and their autograd, the inputs each case makes, the outputs, and torch as peer and
rival."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from tkreg_norms import op

from tkreg.core.specs import case

EXACT = {"rtol": 1e-12, "atol": 1e-12}  # float64 against float64: a few ulps apart at most


def _float64(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 300)], ids=str)
@pytest.mark.parametrize("eps", [1e-6, 0.1])
def test_rms_norm_reference_matches_torch_values_and_gradients(shape: tuple[int, ...], eps: float) -> None:
    x, w = _float64(*shape, seed=1).requires_grad_(), _float64(shape[-1], seed=2).requires_grad_()
    y, rstd = op.rms_norm_reference(x, w, eps=eps)
    want = F.rms_norm(x, (shape[-1],), w, eps)
    torch.testing.assert_close(y, want, **EXACT)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(x.detach().pow(2).mean(-1, keepdim=True) + eps), **EXACT)
    assert rstd.shape == (*shape[:-1], 1)
    dy = _float64(*shape, seed=3)
    got = torch.autograd.grad(y, (x, w), dy)
    torch.testing.assert_close(got, torch.autograd.grad(want, (x, w), dy), **EXACT)


@pytest.mark.parametrize("shape", [(1, 1), (3, 7), (2, 5, 300)], ids=str)
@pytest.mark.parametrize("eps", [1e-5, 0.1])
def test_layer_norm_reference_matches_torch_values_and_gradients(shape: tuple[int, ...], eps: float) -> None:
    x = (_float64(*shape, seed=1) + 3).requires_grad_()  # an offset: centring matters
    w, b = _float64(shape[-1], seed=2).requires_grad_(), _float64(shape[-1], seed=4).requires_grad_()
    y, mean, rstd = op.layer_norm_reference(x, w, b, eps=eps)
    want = F.layer_norm(x, (shape[-1],), w, b, eps)
    torch.testing.assert_close(y, want, **EXACT)
    var, mu = torch.var_mean(x.detach(), dim=-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(mean, mu, **EXACT)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(var + eps), **EXACT)
    dy = _float64(*shape, seed=3)
    got = torch.autograd.grad(y, (x, w, b), dy)
    torch.testing.assert_close(got, torch.autograd.grad(want, (x, w, b), dy), **EXACT)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16], ids=str)
def test_inputs_are_seeded_and_laid_out_as_the_variant_says(dtype: torch.dtype) -> None:
    def make(variant: str, seed: int = 5) -> tuple[torch.Tensor, ...]:
        return op.layer_norm_inputs(case(M=9, N=300, variant=variant), dtype, torch.Generator().manual_seed(seed), "cpu")

    x, w, b = make("")
    assert x.shape == (9, 300) and x.is_contiguous() and w.shape == b.shape == (300,)
    assert x.dtype == w.dtype == b.dtype == dtype
    assert all(torch.equal(p, q) for p, q in zip(make(""), (x, w, b)))  # the same seed, the same data
    assert not torch.equal(make("", seed=6)[0], x)
    padded = make("padded")[0]
    assert padded.shape == (9, 300) and padded.stride(1) == 1
    assert padded.stride(0) > 300 and padded.stride(0) * dtype.itemsize % 16 == 0
    assert padded.data_ptr() % 16 == 0
    offset = make("offset")[0]
    assert offset.shape == (9, 300) and offset.stride(1) == 1 and offset.stride(0) % 2 == 1
    assert offset.data_ptr() % 16 != 0  # one element into its allocation
    with pytest.raises(ValueError, match="unknown case variant 'transposed'"):
        make("transposed")


def test_outputs_are_y_like_x_and_fp32_statistics() -> None:
    x = torch.randn(4, 10, dtype=torch.bfloat16)[:, :7]
    y, rstd = op.rms_norm_outputs(x, torch.empty(7))
    assert (y.shape, y.dtype, y.is_contiguous()) == ((4, 7), torch.bfloat16, True)
    assert (rstd.shape, rstd.dtype) == ((4, 1), torch.float32)  # as torch.native_layer_norm keeps them
    y, mean, rstd = op.layer_norm_outputs(x, torch.empty(7), torch.empty(7))
    assert mean.shape == rstd.shape == (4, 1) and mean.dtype == torch.float32


def test_peers_fill_y_without_a_copy_and_return_new_outputs_for_autograd() -> None:
    x, w, b = torch.randn(5, 32), torch.randn(32), torch.randn(32)
    out = (torch.full((5, 32), float("nan")), torch.full((5, 1), -1.0))
    assert op.rms_norm_peer(x, w, out=out, eps=1e-6) is out
    torch.testing.assert_close(out[0], F.rms_norm(x, (32,), w, 1e-6), rtol=0, atol=0)
    assert torch.all(out[1] == -1)  # rstd is the kernels' own output
    out3 = (torch.empty(5, 32), torch.empty(5, 1), torch.empty(5, 1))
    op.layer_norm_peer(x, w, b, out=out3, eps=1e-5)
    torch.testing.assert_close(out3[0], F.layer_norm(x, (32,), w, b, 1e-5), rtol=0, atol=0)
    leaf = x.clone().requires_grad_()
    y = op.rms_norm_peer(leaf, w, eps=1e-6)
    (grad,) = torch.autograd.grad(y.sum(), leaf)
    assert grad.shape == x.shape


def test_the_torch_compile_rival_compiles_each_signature_for_its_static_shape() -> None:
    x, w, b = torch.randn(4, 64), torch.randn(64), torch.randn(64)
    before = len(op._COMPILED)
    (y,) = op.rms_norm_compiled(x, w, eps=1e-6)
    torch.testing.assert_close(y, F.rms_norm(x, (64,), w, 1e-6))
    out = (torch.empty(4, 64), torch.empty(4, 1), torch.empty(4, 1))
    assert op.layer_norm_compiled(x, w, b, out=out, eps=1e-5) is out
    torch.testing.assert_close(out[0], F.layer_norm(x, (64,), w, b, 1e-5))
    op.rms_norm_compiled(x, w, eps=1e-6)  # the same signature: compiled once
    assert len(op._COMPILED) == before + 2
    op.rms_norm_compiled(torch.randn(3, 32), torch.randn(32), eps=1e-6)  # another shape: its own
    assert len(op._COMPILED) == before + 3


# -- absent weight and bias (Op.optional): None in their place, as torch's functions take it -----

ABSENT = [(False, True), (True, False), (False, False)]  # (weight, bias) present


def _maybe(present: bool, t: torch.Tensor) -> torch.Tensor | None:
    return t if present else None


@pytest.mark.parametrize("shape", [(3, 7), (2, 5, 300)], ids=str)
def test_rms_norm_reference_without_a_weight_matches_torch(shape: tuple[int, ...]) -> None:
    x = _float64(*shape, seed=1).requires_grad_()
    y, rstd = op.rms_norm_reference(x, None, eps=1e-6)
    want = F.rms_norm(x, (shape[-1],), None, 1e-6)
    torch.testing.assert_close(y, want, **EXACT)
    torch.testing.assert_close(rstd, op.rms_norm_reference(x, torch.ones(shape[-1], dtype=torch.float64), eps=1e-6)[1],
                               **EXACT)
    dy = _float64(*shape, seed=3)
    torch.testing.assert_close(torch.autograd.grad(y, x, dy), torch.autograd.grad(want, x, dy), **EXACT)


@pytest.mark.parametrize(("weight", "bias"), ABSENT, ids=["no_weight", "no_bias", "no_affine"])
def test_layer_norm_reference_without_weight_or_bias_matches_torch(weight: bool, bias: bool) -> None:
    n = 300
    x = (_float64(2, 5, n, seed=1) + 3).requires_grad_()
    w = _maybe(weight, _float64(n, seed=2).requires_grad_())
    b = _maybe(bias, _float64(n, seed=4).requires_grad_())
    y, mean, rstd = op.layer_norm_reference(x, w, b, eps=1e-5)
    want = F.layer_norm(x, (n,), w, b, 1e-5)
    torch.testing.assert_close(y, want, **EXACT)
    var, mu = torch.var_mean(x.detach(), dim=-1, unbiased=False, keepdim=True)
    torch.testing.assert_close(mean, mu, **EXACT)
    torch.testing.assert_close(rstd, 1 / torch.sqrt(var + 1e-5), **EXACT)
    leaves = [t for t in (x, w, b) if t is not None]
    dy = _float64(2, 5, n, seed=3)
    torch.testing.assert_close(torch.autograd.grad(y, leaves, dy), torch.autograd.grad(want, leaves, dy), **EXACT)


@pytest.mark.parametrize(("name", "variant", "present"), [
    ("rms_norm", "no_weight", (True, False)),
    ("rms_norm", "no_affine", (True, False)),
    ("layer_norm", "no_bias", (True, True, False)),
    ("layer_norm", "no_weight", (True, False, True)),
    ("layer_norm", "no_affine", (True, False, False)),
])
def test_inputs_of_an_absent_variant_are_none_and_the_rest_as_usual(name: str, variant: str, present: tuple[bool, ...]) -> None:
    make = getattr(op, f"{name}_inputs")

    def inputs(v: str, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor | None, ...]:
        return make(case(M=9, N=300, variant=v), dtype, torch.Generator().manual_seed(5), "cpu")

    got = inputs(variant)
    assert tuple(t is not None for t in got) == present
    x = got[0]
    assert x is not None and x.shape == (9, 300) and x.is_contiguous() and x.dtype == torch.bfloat16
    assert torch.equal(x, inputs("")[0])  # x as in the plain layout: only the vectors differ
    assert all(t.shape == (300,) and t.dtype == torch.bfloat16 for t in got[1:] if t is not None)
    again = inputs(variant)
    assert all(a is b is None or torch.equal(a, b) for a, b in zip(got, again))  # seeded


def test_a_variant_leaving_out_an_input_the_op_lacks_is_refused() -> None:
    with pytest.raises(ValueError, match="'no_bias' leaves out bias, which this op does not take"):
        op.rms_norm_inputs(case(M=3, N=7, variant="no_bias"), torch.float32, torch.Generator(), "cpu")


def test_outputs_are_made_without_weight_or_bias() -> None:
    x = torch.randn(4, 7, dtype=torch.float16)
    y, rstd = op.rms_norm_outputs(x, None)
    assert (y.shape, y.dtype, rstd.shape, rstd.dtype) == ((4, 7), torch.float16, (4, 1), torch.float32)
    for weight, bias in ABSENT:
        y, mean, rstd = op.layer_norm_outputs(x, _maybe(weight, torch.empty(7)), _maybe(bias, torch.empty(7)))
        assert y.shape == x.shape and mean.shape == rstd.shape == (4, 1)


@pytest.mark.parametrize(("weight", "bias"), ABSENT, ids=["no_weight", "no_bias", "no_affine"])
def test_peers_full_peers_and_rivals_pass_none_to_torch(weight: bool, bias: bool) -> None:
    x = torch.randn(5, 64, generator=torch.Generator().manual_seed(6))
    w, b = _maybe(weight, torch.randn(64)), _maybe(bias, torch.randn(64))
    want = F.layer_norm(x, (64,), w, b, 1e-5)
    torch.testing.assert_close(op.layer_norm_peer(x, w, b, eps=1e-5), want, rtol=0, atol=0)
    y, mean, rstd = op.layer_norm_full_peer(x, w, b, eps=1e-5)
    torch.testing.assert_close(y, want, rtol=0, atol=0)
    assert mean.shape == rstd.shape == (5, 1) and mean.dtype == rstd.dtype == torch.float32
    out = (torch.empty(5, 64), torch.empty(5, 1), torch.empty(5, 1))
    assert op.layer_norm_compiled(x, w, b, out=out, eps=1e-5) is out
    torch.testing.assert_close(out[0], want)
    if not weight:  # rms_norm's one optional input
        want = F.rms_norm(x, (64,), None, 1e-6)
        torch.testing.assert_close(op.rms_norm_peer(x, None, eps=1e-6), want, rtol=0, atol=0)
        y, rstd = op.rms_norm_full_peer(x, None, eps=1e-6)
        torch.testing.assert_close(y, want, rtol=0, atol=0)
        assert rstd.shape == (5, 1)
        torch.testing.assert_close(op.rms_norm_compiled(x, None, eps=1e-6)[0], want)
