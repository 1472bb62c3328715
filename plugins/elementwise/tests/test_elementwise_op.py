"""The add op's contract: registration without torch or triton, input layouts per case variant,
outputs TMA can write, the cost model, and the exact comparison."""

from __future__ import annotations

import pytest
import torch
from tkreg_elementwise import add_op
from tkreg_elementwise.plugin import ADD
from tkreg_elementwise.testing import heavy_imports

from tkreg.core.loading import build_registry
from tkreg.core.specs import case
from tkreg.launch.inputs import tma_reasons


def test_plugin_module_imports_neither_torch_nor_triton():
    assert heavy_imports("tkreg_elementwise.plugin") == []


def test_registers_add_and_add_triton_without_problems():
    reg = build_registry(env={"TKREG_PLUGINS": "elementwise"})
    assert reg.problems == []
    assert [k.name for k in reg.kernels("add")] == ["add_triton"]
    assert reg.lookup("add", "interpreter")[0].name == "add_triton"


def test_cases_cover_seed_shapes_odd_shapes_and_bench_shapes():
    ids = {c.id for c in ADD.cases_in("default")}
    assert {"1000x2000", "4000x120", "257x136", "33x33", "8x1", "1x8", "33x33-padded", "257x136-transposed"} <= ids
    assert {c.id for c in ADD.cases_in("bench")} == {"32768x32768", "1024x1024", "10000x10008"}


def _inputs(variant: str, m: int, n: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(3)
    return add_op.make_inputs(case(M=m, N=n, variant=variant), dtype, gen, "cpu")


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_padded_inputs_have_wider_tma_legal_rows(dtype):
    a, b = _inputs("padded", 33, 33, dtype)
    assert a.shape == b.shape == (33, 33)
    assert a.stride(0) > 33 and a.stride(1) == 1
    assert tma_reasons(a, "a") == [] and tma_reasons(b, "b") == []
    out = add_op.make_output(a, b)
    assert out.stride() == a.stride() and tma_reasons(out, "out") == []


def test_transposed_variant_has_a_non_unit_last_stride_and_gets_a_contiguous_output():
    a, b = _inputs("transposed", 20, 12, torch.float32)
    assert a.shape == b.shape == (20, 12) and a.stride(-1) == 20 and b.is_contiguous()
    assert add_op.make_output(a, b).is_contiguous()


def test_inputs_are_random_nonzero_and_reproducible():
    a, b = _inputs("", 64, 64, torch.float16)
    again, _ = _inputs("", 64, 64, torch.float16)
    assert torch.equal(a, again) and not torch.equal(a, b)
    assert (a != 0).float().mean() > 0.99


def test_unknown_variant_is_refused():
    with pytest.raises(ValueError, match="unknown case variant 'diagonal'"):
        _inputs("diagonal", 4, 4, torch.float32)


def test_cost_counts_three_tensors_and_one_flop_per_element():
    cost = add_op.cost({"M": 1000, "N": 2000}, 2)
    assert (cost.bytes, cost.flops) == (3 * 1000 * 2000 * 2, 1000 * 2000)


def test_tolerance_is_exact_for_every_dtype():
    assert all((t.atol, t.rtol) == (0.0, 0.0) for t in ADD.tolerances.values())
