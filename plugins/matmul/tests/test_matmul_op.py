"""The matmul op's contract: registration, inputs per variant, cost, and a tolerance that passes
honest fp32 accumulation but fails the bugs it must catch."""

from __future__ import annotations

import math
import subprocess
import sys

import pytest
import torch
from tkreg_matmul import op
from tkreg_matmul.layouts import b_layout, b_tma_reasons

from tkreg.core.loading import build_registry
from tkreg.core.specs import case
from tkreg.launch.inputs import tma_reasons
from tkreg.testing.checking import compare
from tkreg.testing.harness import make_inputs


@pytest.fixture(scope="module")
def matmul_op():
    registry = build_registry(env={"TKREG_PLUGINS": "matmul"})
    assert registry.problems == []
    return registry.op("matmul")


def test_plugin_imports_neither_torch_nor_triton():
    code = "import sys, tkreg_matmul.plugin; assert 'torch' not in sys.modules and 'triton' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_cases_cover_required_shapes(matmul_op):
    default = {c.id for c in matmul_op.cases_in("default")}
    assert {"208x416x304", "129x136x72", "300x520x1000", "1x8x8", "33x33x33"} <= default
    # B as an nn.Linear weight, odd sizes included, and one the TMA kernels must refuse (K odd).
    assert {"97x264x304-weight", "129x136x72-weight", "1x8x8-weight", "129x136x296-weight-strided", "16x40x33-weight"} <= default
    assert {"2000x1000x2000", "16x4096x4104-weight"} <= {c.id for c in matmul_op.cases_in("gpu")}


def test_bench_suite_is_the_llama_projections_in_both_layouts(matmul_op):
    bench = {c.id for c in matmul_op.cases_in("bench")}
    for m in (16, 128, 2048, 16384):
        for n, k in ((4096, 4096), (6144, 4096), (14336, 4096), (4096, 14336)):
            assert {f"{m}x{n}x{k}", f"{m}x{n}x{k}-weight"} <= bench
    assert {"3000x5000x2000", "3000x5000x2000-weight"} <= bench
    assert {f"8192x8192x{k}" for k in (512, 1024, 2048, 4096, 8192, 16384)} <= bench
    assert {"16x4608x3584-weight-bias", "2048x4608x3584-weight-bias"} <= bench  # a fused QKV projection with a bias
    assert len(bench) == 42
    assert matmul_op.bench_dtypes == ("bfloat16",)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
@pytest.mark.parametrize("variant", ["", "strided", "transposed", "weight", "weight-strided"])
def test_make_inputs_layouts(matmul_op, dtype, variant):
    a, b, bias = make_inputs(matmul_op, case(M=33, N=24, K=40, variant=variant), dtype, seed=1, device="cpu")
    assert a.shape == (33, 40) and b.shape == (40, 24)
    assert bias is None
    assert a.dtype == b.dtype == getattr(torch, dtype)
    assert bool((a != 0).any()) and bool((b != 0).any())
    legal = not tma_reasons(a, "a") and b_tma_reasons(b)[1] == []
    if variant == "":
        assert a.is_contiguous() and b.is_contiguous()
        assert b_layout(b) == "kn"
    elif variant == "strided":
        assert a.stride(0) > a.shape[1] and b.stride(0) > b.shape[1]
        assert legal and b_layout(b) == "kn"
    elif variant == "transposed":
        assert a.stride() == (1, 33) and b.stride() == (1, 40)
        assert not legal
    else:
        # B = W.t(): W is a row-major (24, 40) weight (padded rows and an offset base when strided).
        assert b.stride(0) == 1 and b.t().stride(1) == 1 and a.is_contiguous()
        assert (b.stride(1) > 40) == (variant == "weight-strided")
        assert legal and b_layout(b) == "nk"


@pytest.mark.parametrize("layout", ["", "strided", "transposed", "weight", "weight-strided", "batched", "batched-weight"])
def test_bias_variants_add_a_bias_to_the_same_operands(matmul_op, layout):
    dims = {"B": 2, "M": 5, "N": 24, "K": 40} if layout.startswith("batched") else {"M": 5, "N": 24, "K": 40}
    plain = make_inputs(matmul_op, case(**dims, variant=layout), "bfloat16", seed=4, device="cpu")
    a, b, bias = make_inputs(matmul_op, case(**dims, variant=f"{layout}-bias" if layout else "bias"), "bfloat16", seed=4,
                             device="cpu")  # fmt: skip
    assert torch.equal(a, plain[0]) and torch.equal(b, plain[1]) and a.stride() == plain[0].stride()
    assert plain[2] is None
    assert bias.shape == (24,) and bias.dtype == torch.bfloat16 and bias.is_contiguous() and bool((bias != 0).any())


def test_reference_adds_the_bias_to_every_row():
    a, b, bias = (torch.randn(*shape, dtype=torch.float64) for shape in ((3, 2, 4), (4, 5), (5,)))
    assert torch.allclose(op.reference(a, b, bias), torch.einsum("imk,kn->imn", a, b) + bias)
    assert torch.equal(op.reference(a, b), a @ b)


@pytest.mark.parametrize("a_shape", [(5, 8), (2, 3, 8)])
def test_the_peer_with_a_bias_is_f_linear_into_any_given_output(a_shape):
    g = torch.Generator().manual_seed(1)
    a, w, bias = (torch.randn(*s, generator=g, dtype=torch.float64) for s in (a_shape, (6, 8), (6,)))
    want = torch.nn.functional.linear(a, w, bias)
    assert torch.equal(op.peer(a, w.t(), bias), want)
    out = torch.full((*a_shape[:-1], 6), float("nan"), dtype=torch.float64)
    assert op.peer(a, w.t(), bias, out=out) is out and torch.allclose(out, want)
    strided = torch.full((6, *a_shape[:-1]), float("nan"), dtype=torch.float64).movedim(0, -1)  # not contiguous
    assert op.peer(a, w.t(), bias, out=strided) is strided and torch.allclose(strided, want)
    batched_a, batched_b = torch.randn(3, 5, 8, dtype=torch.float64), torch.randn(3, 8, 6, dtype=torch.float64)
    into = torch.empty(3, 5, 6, dtype=torch.float64)
    assert op.peer(batched_a, batched_b, bias, out=into) is into and torch.allclose(into, batched_a @ batched_b + bias)
    assert torch.equal(op.peer(a, w.t()), a @ w.t())
    wide = torch.randn(*a_shape[:-1], 6, dtype=torch.float64)  # a bias torch broadcasts: F.linear's answer
    assert torch.allclose(op.peer(a, w.t(), wide), torch.nn.functional.linear(a, w, wide))


@pytest.mark.parametrize(("shapes", "named"), [
    (((5, 8), (8, 6), None), True), (((2, 5, 8), (8, 6), None), True), (((3, 5, 8), (3, 8, 6), None), True),
    (((5, 8), (8, 6), (6,)), True), (((3, 5, 8), (3, 8, 6), (6,)), True),
    (((2, 5, 8), (8, 6), (6,)), False), (((5, 8), (8, 6), (5, 6)), False),
])  # fmt: skip
def test_peer_direct_names_the_call_the_peer_makes(shapes, named):
    """Where it names a torch call, that call on the inputs in its order is the peer's answer,
    bit for bit; where the peer reshapes (a bias with A of more than two dims) or broadcasts a
    bias that is not 1-D, it names none."""
    g = torch.Generator().manual_seed(2)
    inputs = [None if s is None else torch.randn(*s, generator=g, dtype=torch.float64) for s in shapes]
    found = op.peer_direct(shapes)
    assert (found is not None) == named
    if named:
        target, order = found
        assert torch.equal(target(*(inputs[i] for i in order)), op.peer(*inputs))


def test_unknown_variant_names_the_known_ones(matmul_op):
    with pytest.raises(ValueError, match="'weight-bias'"):
        make_inputs(matmul_op, case(M=2, N=2, K=2, variant="weight-biased"), "float16", seed=1, device="cpu")


def test_make_inputs_fresh_per_seed(matmul_op):
    c = case(M=16, N=16, K=16)
    a1, _, _ = make_inputs(matmul_op, c, "float16", seed=1, device="cpu")
    a2, _, _ = make_inputs(matmul_op, c, "float16", seed=2, device="cpu")
    a3, _, _ = make_inputs(matmul_op, c, "float16", seed=1, device="cpu")
    assert not torch.equal(a1, a2) and torch.equal(a1, a3)


def test_cost():
    cost = op.cost({"M": 8192, "N": 8192, "K": 512}, 2)
    assert cost.flops == 2 * 8192 * 8192 * 512
    assert cost.bytes == (8192 * 512 * 2 + 8192 * 8192) * 2


def test_tolerance_table_from_the_argument(matmul_op):
    for dtype, u in (("float16", 2.0**-11), ("bfloat16", 2.0**-8)):
        tol = matmul_op.tolerance(dtype, case(M=4, N=4, K=2000))
        assert tol.rtol == 2 * u
        assert tol.atol == pytest.approx(8 * 2.0**-24 * (2 / math.pi) * 2000**1.5)


def _fp32_result(a, b, k_keep=None):
    """What a correct kernel returns: products summed in fp32 (sequentially, the worst order for
    rounding error), rounded to the input dtype. k_keep drops the K tail, like a buggy kernel."""
    k = a.shape[1] if k_keep is None else k_keep
    acc = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float32)
    af, bf = a.float(), b.float()
    for i in range(k):
        acc += af[:, i : i + 1] * bf[i : i + 1, :]
    return acc.to(a.dtype)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_tolerance_passes_fp32_accumulation_and_fails_bugs(matmul_op, dtype):
    c = case(M=64, N=48, K=1000)
    a, b, _ = make_inputs(matmul_op, c, dtype, seed=3, device="cpu")
    ref = op.reference(a.double(), b.double()).to(a.dtype).double()
    tol = matmul_op.tolerance(dtype, c)
    assert compare(_fp32_result(a, b), ref, tol).ok
    # A K tail of 8 dropped (e.g. a missing mask on the last BLOCK_K step) must fail widely.
    dropped = compare(_fp32_result(a, b, k_keep=992), ref, tol)
    assert dropped.mismatched > 0.9 * dropped.total
    # One wrong tile (stale data in a 16 x 16 block) must fail.
    wrong = _fp32_result(a, b)
    wrong[16:32, 16:32] = wrong[0:16, 0:16]
    assert compare(wrong, ref, tol).mismatched > 200
